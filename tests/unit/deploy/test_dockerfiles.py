"""The container images, without a container engine: each Dockerfile's build is simulated
(the build context as .dockerignore leaves it, the COPY steps into the stage that installs the
project) and every file of every package pyproject.toml ships must land where `pip install .`
reads it; the bases are overridable and pinned; the final stage runs `thaw` from the venv as
uid 10001, with bytecode never written at run time. `make test-image` builds and runs the real
image (deploy/image/smoke.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest
from setuptools import find_packages

from tests.unit.deploy.chart_paths import REPO_ROOT

DOCKERFILES = ["Dockerfile", "Dockerfile.cuda"]


def instructions(text: str, name: str = "Dockerfile") -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, `\\` continuations joined."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # a comment inside a continuation is dropped too, as Docker does
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        if not word.isalpha():
            raise ValueError(f"{name}: not an instruction: {line[:80]!r}")
        result.append((word.upper(), rest.strip()))
    if pending:
        raise ValueError(f"{name}: ends inside a continuation")
    return result


# --- .dockerignore, as Docker's pattern matcher reads it ---------------------------------


@dataclass(frozen=True)
class IgnoreRule:
    regex: re.Pattern[str]
    negated: bool


def ignore_rules(text: str) -> list[IgnoreRule]:
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = str(PurePosixPath(line.lstrip("!").strip().lstrip("/")))
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex += "(?:.*/)?"
                i += 3
            elif pattern.startswith("**", i):
                regex += ".*"
                i += 2
            elif pattern[i] == "*":
                regex += "[^/]*"
                i += 1
            elif pattern[i] == "?":
                regex += "[^/]"
                i += 1
            else:
                regex += re.escape(pattern[i])
                i += 1
        rules.append(IgnoreRule(re.compile(regex + r"\Z"), negated))
    return rules


def ignored(path: str, rules: list[IgnoreRule]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for rule in rules:
        if any(rule.regex.match(prefix) for prefix in prefixes):
            verdict = not rule.negated
    return verdict


def test_the_ignore_matcher_reads_patterns_as_docker_does() -> None:
    rules = ignore_rules("**/__pycache__\ndeploy\n!deploy/image/requirements.py\n*.log\n")
    assert ignored("runtime/__pycache__/x.pyc", rules)
    assert ignored("deploy/helm/thaw/values.yaml", rules)
    assert not ignored("deploy/image/requirements.py", rules)
    assert ignored("build.log", rules) and not ignored("runtime/build.log", rules)
    assert not ignored("runtime/process/server.py", rules)


# --- the build, simulated -------------------------------------------------------------------


def shipped_files() -> list[str]:
    """Every file `pip install .` needs: the packages pyproject.toml's `packages.find` finds
    (their .py files), their package data, pyproject.toml and the readme it names."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    setuptools_cfg = pyproject["tool"]["setuptools"]
    packages = find_packages(str(REPO_ROOT), include=setuptools_cfg["packages"]["find"]["include"])
    files = ["pyproject.toml", pyproject["project"]["readme"]]
    for package in packages:
        folder = REPO_ROOT / package.replace(".", "/")
        files += [p.relative_to(REPO_ROOT).as_posix() for p in sorted(folder.glob("*.py"))]
    for package, globs in setuptools_cfg.get("package-data", {}).items():
        for pattern in globs:
            found = sorted((REPO_ROOT / package.replace(".", "/")).glob(pattern))
            assert found, f"package-data {package}: {pattern} matches nothing"
            files += [p.relative_to(REPO_ROOT).as_posix() for p in found]
    return files


def files_in_install_stage(dockerfile: str, dockerignore: str, wanted: list[str]) -> set[str]:
    """Which of `wanted` (paths in the repository) the build places where the project is
    installed: the COPY steps (from the context, .dockerignore applied) of the stage whose RUN
    does `pip install ... .` or `pip wheel ... .`, resolved against its WORKDIR."""
    rules = ignore_rules(dockerignore)
    context = [path for path in wanted if not ignored(path, rules)]
    placed: set[str] = set()
    workdir = PurePosixPath("/")
    for word, rest in instructions(dockerfile):
        if word == "FROM":
            placed, workdir = set(), PurePosixPath("/")
        elif word == "WORKDIR":
            workdir = workdir / rest
        elif word == "COPY" and not rest.startswith("--from"):
            *sources, dest = rest.split()
            target = workdir / dest
            for source in sources:
                src = PurePosixPath(source).as_posix().strip("/")
                for path in context:
                    if src == ".":
                        placed.add((target / path).as_posix())
                    elif path == src:
                        into_dir = dest.endswith("/") or len(sources) > 1
                        placed.add((target / PurePosixPath(path).name).as_posix() if into_dir
                                   else target.as_posix())  # fmt: skip
                    elif path.startswith(src + "/"):
                        placed.add((target / path[len(src) + 1 :]).as_posix())
        elif word == "RUN" and re.search(
            r"pip (install|wheel) [^&]*\s'?\.(\[[\w,]*\])?'?(\s|$)", rest
        ):
            return {path for path in wanted if (workdir / path).as_posix() in placed}
    raise AssertionError("no stage runs `pip install ... .` or `pip wheel ... .`")


@pytest.mark.parametrize("name", DOCKERFILES)
def test_every_file_of_every_shipped_package_reaches_the_install(name: str) -> None:
    wanted = shipped_files()
    assert "thawwire/__init__.py" in wanted and "activator/surfaces/ui/index.html" in wanted
    got = files_in_install_stage(
        (REPO_ROOT / name).read_text(), (REPO_ROOT / ".dockerignore").read_text(), wanted
    )
    missing = sorted(set(wanted) - got)
    assert not missing, f"{name}: not in the build's install stage: {missing[:10]}"


# The Dockerfile as it was when the image could not start: a COPY per package, thawwire forgotten.
LISTED_COPIES = """
FROM base AS build
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY activator ./activator
COPY runtime ./runtime
COPY snapshotter ./snapshotter
COPY thaw ./thaw
COPY tritonconfig ./tritonconfig
RUN /opt/thaw/bin/pip install -c constraints.txt '.[kubernetes]'
"""


def test_the_check_catches_a_forgotten_package() -> None:
    wanted = shipped_files()
    got = files_in_install_stage(LISTED_COPIES, "", wanted)
    missing = set(wanted) - got
    # the old Dockerfile forgot thawwire, and a listing would forget every new package too
    assert missing and all(path.startswith(("thawwire/", "thawserver/")) for path in missing)
    assert {"thawwire/__init__.py", "thawserver/__init__.py"} <= missing
    whole_context = "FROM b\nWORKDIR /src\nCOPY . .\nRUN pip install --no-deps .\n"
    assert files_in_install_stage(whole_context, "", wanted) == set(wanted)
    assert not files_in_install_stage(whole_context, "*", wanted)


def test_the_build_context_leaves_out_venvs_tools_tests_and_repositories() -> None:
    rules = ignore_rules((REPO_ROOT / ".dockerignore").read_text())
    never_shipped = [
        ".venv/bin/python", ".git/HEAD", ".tools/bin/helm", "tests/conftest.py",
        "model_repository/resnet50/1/model.onnx", "runtime/__pycache__/x.pyc",
        "docs/image.md", "deploy/helm/thaw/values.yaml", ".image/repository/x",
    ]  # fmt: skip
    for path in never_shipped:
        assert ignored(path, rules), path
    # the dependency stage's inputs stay in the context
    for path in ("deploy/image/requirements.py", "constraints.txt", "constraints-gpu.txt"):
        assert not ignored(path, rules), path


# --- bases, user, entrypoint, bytecode -------------------------------------------------------


def _arg_defaults(steps: list[tuple[str, str]]) -> dict[str, str]:
    found = {}
    for word, rest in steps:
        if word == "ARG" and "=" in rest:
            key, _, value = rest.partition("=")
            found[key] = value
    return found


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_base_is_overridable_and_pinned_and_thaw_runs_as_10001(name: str) -> None:
    text = (REPO_ROOT / name).read_text()
    steps = instructions(text, name)
    first_from = next(i for i, (w, _) in enumerate(steps) if w == "FROM")
    args_before = _arg_defaults(steps[:first_from])
    assert "BASE_IMAGE" in args_before, "ARG BASE_IMAGE before the first FROM"
    froms = [rest.split() for word, rest in steps if word == "FROM"]
    stages = {parts[2] for parts in froms if len(parts) == 3 and parts[1].upper() == "AS"}
    assert all(parts[0] in ("${BASE_IMAGE}", *stages) for parts in froms), froms
    _, _, tag = args_before["BASE_IMAGE"].partition(":")
    assert re.fullmatch(r"3\.11\.\d+-slim-bookworm", tag), "Python 3.11, an exact release"
    final = steps[max(i for i, (w, _) in enumerate(steps) if w == "FROM") :]
    assert [rest for word, rest in final if word == "USER"] == ["10001:10001"]
    assert [json.loads(rest) for word, rest in final if word == "ENTRYPOINT"] == [["thaw"]]
    env = " ".join(rest for word, rest in final if word == "ENV")
    for setting in ("PATH=/opt/thaw/bin:$PATH", "PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp"):
        assert setting in env
    assert re.search(r"FROM \$\{BASE_IMAGE\} AS deps\b", text), "one venv stage, the final's base"
    assert steps[-len(final)] == ("FROM", "deps"), "the final stage adds the project to it"
    assert any(w == "RUN" and re.search(r"pip install --no-compile --no-deps /tmp/wheel/", r)
               for w, r in final)  # fmt: skip
    runs = " ".join(rest for word, rest in steps if word == "RUN")
    assert "useradd --uid 10001 --gid thaw" in runs
    assert "--invalidation-mode unchecked-hash" in runs, "bytecode valid whatever the copy does"


def _installed_extras(name: str) -> list[str]:
    steps = instructions((REPO_ROOT / name).read_text(), name)
    for word, rest in steps:
        match = re.search(r"requirements\.py \S+ ([\w ]+?)(?: \$\{| >)", rest)
        if word == "RUN" and match:
            return match.group(1).split()
    raise AssertionError(f"{name}: no requirements.py step")


def test_the_cpu_image_carries_the_cpu_extra_and_the_cuda_image_the_gpu_one() -> None:
    assert sorted(_installed_extras("Dockerfile")) == ["cpu", "kubernetes"]
    assert sorted(_installed_extras("Dockerfile.cuda")) == ["gpu", "kubernetes"]
    cuda = (REPO_ROOT / "Dockerfile.cuda").read_text()
    assert "COPY constraints-gpu.txt" in cuda and "nvidia/cuda" not in cuda
    for name in DOCKERFILES:
        text = (REPO_ROOT / name).read_text()
        assert re.search(r"apt-get install [^&]*\bg\+\+", text), f"{name}: torch.compile's compiler"


def test_the_entrypoint_runs_in_the_venv() -> None:
    thaw = Path(sys.executable).parent / "thaw"
    assert thaw.is_file(), "the venv's console script (`thaw = thaw.cli:main`)"
    done = subprocess.run([str(thaw), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for command in ("serve", "up", "status", "snapshot", "prefetch"):
        assert f"thaw {command}" in done.stdout
