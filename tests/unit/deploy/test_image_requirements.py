"""deploy/image/requirements.py: what the image's dependency layer installs, read from
pyproject.toml (the real one, and small ones that exercise self-references and --omit)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from tests.unit.deploy.chart_paths import REPO_ROOT

SCRIPT = REPO_ROOT / "deploy" / "image" / "requirements.py"


def run(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


def test_the_cpu_image_gets_the_base_dependencies_and_its_extras() -> None:
    done = run(str(REPO_ROOT / "pyproject.toml"), "cpu", "kubernetes")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert lines == [*project["dependencies"], *extras["cpu"], *extras["kubernetes"]]
    assert not any(line.startswith("onnxruntime-gpu") for line in lines)


def test_self_references_expand_and_omit_leaves_a_distribution_out(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "Thaw_Serve"\ndependencies = ["numpy>=1"]\n'
        "[project.optional-dependencies]\n"
        'cpu = ["onnxruntime>=1.17"]\n'
        'gpu = ["onnxruntime-gpu>=1.19", "tensorrt-cu12>=10,<11"]\n'
        'test = ["thaw-serve[cpu]", "pytest", "numpy>=1"]\n'
    )
    done = run("pyproject.toml", "test", cwd=str(tmp_path))
    assert done.stdout.split() == ["numpy>=1", "onnxruntime>=1.17", "pytest"]
    done = run("pyproject.toml", "gpu", "--omit", "TensorRT_cu12", cwd=str(tmp_path))
    assert done.stdout.split() == ["numpy>=1", "onnxruntime-gpu>=1.19"]


def test_an_unknown_extra_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = []\n')
    done = run("pyproject.toml", "gpu", cwd=str(tmp_path))
    assert done.returncode != 0 and "no extra named 'gpu'" in done.stderr
