"""Session fixtures: one `thaw up` over a repository of tiny models with per-model settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.models import make_add_sub, make_onnx_add, make_slow_execute
from tests.integration.activator.up_process import UpProcess, make_broken, with_params


@pytest.fixture(scope="session")
def up_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("activator_repo")
    with_params(make_add_sub(repo), target_concurrency=100, max_replicas=1)
    with_params(make_onnx_add(repo), scale_to_zero_grace_s=1)
    with_params(
        make_slow_execute(repo, "overflow", delay_s=2.0),
        max_held_requests=2,
        container_concurrency=1,
        max_replicas=1,
    )
    with_params(make_slow_execute(repo, "slow", delay_s=3.0), max_replicas=1)
    with_params(make_broken(repo), activation_timeout_s=20)
    return repo


@pytest.fixture(scope="session")
def up(up_repo: Path) -> Iterator[UpProcess]:
    server = UpProcess(
        up_repo,
        "--warm-pool", "1",
        "--preload-frameworks", "onnxruntime",
        "--no-image-build",
        "--cache", str(up_repo.parent / "cache"),
        "--log-level", "info",
    )  # fmt: skip
    yield server
    server.stop()
