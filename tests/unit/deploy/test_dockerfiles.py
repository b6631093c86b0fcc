"""The container images, without a Docker engine: both Dockerfiles parse, build from pinned
bases, copy only what exists, run as a non-root user with `thaw` as the entrypoint from the
venv they build; and that entrypoint runs in a venv (`thaw --help` lists every component)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.deploy.conftest import REPO_ROOT

DOCKERFILES = ["Dockerfile", "Dockerfile.cuda"]


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, `\\` continuations joined."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        if not word.isalpha():
            raise ValueError(f"{path.name}: not an instruction: {line[:80]!r}")
        result.append((word.upper(), rest.strip()))
    assert not pending, f"{path.name}: ends inside a continuation"
    return result


def _args(steps: list[tuple[str, str]]) -> dict[str, str]:
    found = {}
    for word, rest in steps:
        if word == "ARG" and "=" in rest:
            key, _, value = rest.partition("=")
            found[key] = value
    return found


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_image_builds_from_pinned_bases_and_runs_thaw_as_non_root(name: str) -> None:
    steps = instructions(REPO_ROOT / name)
    args = _args(steps)
    froms = [rest for word, rest in steps if word == "FROM"]
    assert len(froms) == 2, "a build stage and a slim final stage"
    for base in froms:
        image = base.split()[0]
        resolved = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
        _, _, tag = resolved.partition(":")
        assert tag and tag != "latest" and re.search(r"\d+\.\d+\.\d+", tag), resolved
    final = steps[max(i for i, (w, _) in enumerate(steps) if w == "FROM") :]
    users = [rest for word, rest in final if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    entry = [rest for word, rest in final if word == "ENTRYPOINT"]
    assert [json.loads(e) for e in entry] == [["thaw"]]
    env = " ".join(rest for word, rest in final if word == "ENV")
    assert "PATH=/opt/thaw/bin:$PATH" in env
    assert any(w == "COPY" and r.startswith("--from=build /opt/thaw") for w, r in final)
    for word, rest in steps:
        if word == "COPY" and not rest.startswith("--from"):
            for source in rest.split()[:-1]:
                assert (REPO_ROOT / source).exists(), f"{name}: COPY {source}: no such path"
        if word == "RUN" and "pip install" in rest:
            assert "kubernetes" in rest, "the image carries the Kubernetes backend's client"


def test_the_build_context_leaves_out_venvs_tools_and_tests() -> None:
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    for entry in (".venv", ".tools", "tests", ".git"):
        assert entry in ignored


def test_the_entrypoint_runs_in_the_venv() -> None:
    thaw = Path(sys.executable).parent / "thaw"
    assert thaw.is_file(), "the venv's console script (`thaw = thaw.cli:main`)"
    done = subprocess.run([str(thaw), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for command in ("serve", "up", "status", "snapshot", "prefetch"):
        assert f"thaw {command}" in done.stdout
    up = subprocess.run([str(thaw), "up", "--help"], capture_output=True, text=True, timeout=60)
    assert up.returncode == 0 and "--scaler" in up.stdout and "--pool-selector" in up.stdout
