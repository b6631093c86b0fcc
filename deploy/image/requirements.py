"""Print the requirements of the project and the named extras, one a line, from pyproject.toml.

    python3 requirements.py PYPROJECT [EXTRA ...] [--omit "NAME ..."] > requirements.txt

The image build installs these in a layer of their own (cached while they do not change),
then the project itself with `--no-deps`. A self-reference (`thaw-serve[cpu]` inside an extra)
is expanded in place. `--omit` leaves out the requirements on those distributions (the CUDA
image's `--build-arg OMIT=tensorrt-cu12`: an image without TensorRT, where pypi.nvidia.com,
which serves TensorRT's wheels, is out of reach). Standard library only: it runs on the bare
base image.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any

_SELF = re.compile(r"^\s*(?P<name>[A-Za-z0-9._-]+)\s*\[(?P<extras>[^\]]+)\]\s*$")
_NAME = re.compile(r"^\s*([A-Za-z0-9._-]+)")


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(
    pyproject: dict[str, Any], extras: list[str], omit: frozenset[str] = frozenset()
) -> list[str]:
    """The base dependencies plus each extra's, self-references expanded, first seen kept,
    those on a distribution named in `omit` left out."""
    project = pyproject["project"]
    name = _normalise(str(project["name"]))
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    out: list[str] = []
    seen_extras: set[str] = set()

    def add(lines: list[str]) -> None:
        for line in lines:
            match = _SELF.match(line)
            if match and _normalise(match["name"]) == name:
                expand([e.strip() for e in match["extras"].split(",")])
            elif line not in out and _normalise(_requirement_name(line)) not in omit:
                out.append(line)

    def expand(names: list[str]) -> None:
        for extra in names:
            if extra in seen_extras:
                continue
            if extra not in optional:
                raise SystemExit(f"requirements.py: no extra named {extra!r} in pyproject.toml")
            seen_extras.add(extra)
            add(optional[extra])

    add(list(project.get("dependencies", [])))
    expand(extras)
    return out


def _requirement_name(line: str) -> str:
    match = _NAME.match(line)
    if match is None:
        raise SystemExit(f"requirements.py: not a requirement: {line!r}")
    return match.group(1)


def main(argv: list[str]) -> int:
    omit: set[str] = set()
    if "--omit" in argv:
        at = argv.index("--omit")
        omit = {_normalise(name) for name in " ".join(argv[at + 1 :]).split()}
        argv = argv[:at]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    data = tomllib.loads(Path(argv[0]).read_text())
    print("\n".join(requirements(data, argv[1:], frozenset(omit))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
