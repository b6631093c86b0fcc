"""What each install of the project brings, read from pyproject.toml: the CPU `onnxruntime` and
`onnxruntime-gpu` share one package directory (whichever lands last wins, and the CPU wheel has
no CUDA EP), so no install set may carry both; the `gpu` extra and constraints-gpu.txt pin
torch, onnxruntime-gpu and TensorRT to releases built for one CUDA major (docs/image.md)."""

from __future__ import annotations

import itertools
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.unit.deploy.chart_paths import REPO_ROOT

ORT_CPU, ORT_GPU = "onnxruntime", "onnxruntime-gpu"
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def install_set(extras: tuple[str, ...]) -> dict[str, Requirement]:
    """The project's own requirements for `pip install '.[extras]'`: the base dependencies and
    each extra's, self-references (`thaw-serve[cpu]`) followed."""
    found: dict[str, Requirement] = {}
    todo, seen = list(extras), set()
    for line in PROJECT["dependencies"]:
        req = Requirement(line)
        found[_name(req.name)] = req
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for line in EXTRAS[extra]:
            req = Requirement(line)
            if _name(req.name) == _name(PROJECT["name"]):
                todo += sorted(req.extras)
            else:
                found[_name(req.name)] = req
    return found


def all_extra_sets() -> list[tuple[str, ...]]:
    """Every combination of extras but those naming both `cpu` and `gpu` (exclusive by design)."""
    names = sorted(EXTRAS)
    every = [c for n in range(len(names) + 1) for c in itertools.combinations(names, n)]
    return [c for c in every if not {"cpu", "gpu"} <= set(c)]


@pytest.mark.parametrize("extras", all_extra_sets(), ids=lambda e: ",".join(e) or "base")
def test_no_install_set_carries_both_onnxruntime_builds(extras: tuple[str, ...]) -> None:
    names = install_set(extras)
    assert not (ORT_CPU in names and ORT_GPU in names), f".[{','.join(extras)}] carries both"


def test_only_the_cpu_extra_brings_onnxruntime_and_only_gpu_brings_onnxruntime_gpu() -> None:
    assert ORT_CPU not in install_set(()) and ORT_GPU not in install_set(())
    for extra in EXTRAS:
        names = install_set((extra,))
        assert (ORT_CPU in names) == (extra == "cpu"), extra
        assert (ORT_GPU in names) == (extra == "gpu"), extra


def _named_extra_sets() -> list[tuple[str, str]]:
    """(where, extras) of every install this repository runs: `.[...]` in the Makefile, the CI
    script, README and docs; the extras each Dockerfile's requirements step names."""
    found = []
    files = [REPO_ROOT / "Makefile", REPO_ROOT / ".ci" / "run", REPO_ROOT / "README.md"]
    files += sorted((REPO_ROOT / "docs").glob("*.md"))
    for path in files:
        for match in re.finditer(r"\.\[([\w,\s-]+)\]", path.read_text()):
            found.append((path.name, match.group(1)))
    for name in ("Dockerfile", "Dockerfile.cuda"):
        text = (REPO_ROOT / name).read_text()
        for match in re.finditer(r"requirements\.py \S+ ([\w ]+?)(?: \$\{| >)", text):
            found.append((name, ",".join(match.group(1).split())))
    return found


def test_every_install_the_repository_runs_carries_one_onnxruntime() -> None:
    sets = _named_extra_sets()
    assert any(where == "Makefile" for where, _ in sets)
    assert {"Dockerfile", "Dockerfile.cuda"} <= {where for where, _ in sets}
    for where, extras in sets:
        names = install_set(tuple(e.strip() for e in extras.split(",") if e.strip()))
        assert not (ORT_CPU in names and ORT_GPU in names), f"{where}: .[{extras}] carries both"


def test_make_install_still_carries_the_cpu_onnxruntime() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    install = re.search(r"-e '\.\[([\w,]+)\]'", makefile)
    assert install, "make install's pip line"
    names = install_set(tuple(install.group(1).split(",")))
    assert ORT_CPU in names and "pytest" in names and ORT_GPU not in names


def _pins(path: Path) -> dict[str, Version]:
    pins = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{path.name}: {line} is not an exact pin"
            pins[_name(req.name)] = Version(spec.version)
    return pins


def test_the_gpu_constraints_pin_one_cuda_major_inside_the_gpu_extra() -> None:
    pins = _pins(REPO_ROOT / "constraints-gpu.txt")
    gpu = install_set(("gpu",))
    for name in ("torch", ORT_GPU, "tensorrt-cu12"):
        assert name in pins, f"constraints-gpu.txt pins {name}"
        assert gpu[name].specifier.contains(pins[name]), f"{name}=={pins[name]} outside .[gpu]"
    # TensorRT 10: the major onnxruntime-gpu's TensorRT EP links (libnvinfer.so.10); 11 is CUDA 13
    assert pins["tensorrt-cu12"].major == 10
    assert not any(n in gpu for n in ("tensorrt", "tensorrt-cu13")), "the CUDA-12 TensorRT only"
    # the last PyPI releases built for CUDA 12 (their wheels' nvidia-*-cu12 dependencies)
    assert pins[ORT_GPU] < Version("1.27") and pins["torch"] < Version("2.11")
    assert {"cuda", "cudnn"} <= gpu[ORT_GPU].extras, "its CUDA libraries from the cu12 wheels"
