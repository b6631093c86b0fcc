"""One `thaw up` for the replica fault tests: recorder models in the activator's data path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.models import make_execution_recorder
from tests.fixtures.up_process import UpProcess, with_params
from tests.integration.faults.up_limits import REQUEST_TIMEOUT_S


@pytest.fixture(scope="module")
def faults_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("faults_repo")
    # In the data path (no handed-off connections): the activator sees the replica fail.
    for name in ("victim", "hang", "oom", "pooled"):
        with_params(make_execution_recorder(repo, name), max_replicas=1, direct_connections="false")
    return repo


@pytest.fixture(scope="module")
def up(faults_repo: Path) -> Iterator[UpProcess]:
    server = UpProcess(
        faults_repo,
        "--warm-pool", "1",
        "--preload-frameworks", "",
        "--no-image-build",
        "--cache", str(faults_repo.parent / "cache"),
        "--request-timeout-s", str(REQUEST_TIMEOUT_S),
        "--drain-timeout-s", "2",  # the hung model's replica is still sleeping at the end
        "--log-level", "info",
    )  # fmt: skip
    yield server
    server.stop()
