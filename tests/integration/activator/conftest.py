"""Session fixtures: one `thaw up` over a repository of tiny models with per-model settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.models import make_add_sub, make_slow_execute, make_slow_init
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.up_process import UpProcess, make_broken, with_params
from tests.integration.activator.serve_beside import ServeBeside
from tests.integration.activator.up_limits import MAX_BODY_BYTES, hold_file


@pytest.fixture(scope="session")
def up_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("activator_repo")
    with_params(make_add_sub(repo), target_concurrency=100, max_replicas=1)
    with_params(make_onnx_add(repo), scale_to_zero_grace_s=1)
    with_params(
        make_slow_execute(repo, "overflow", delay_s=2.0, hold_file=hold_file(repo, "overflow")),
        max_held_requests=2,
        container_concurrency=1,
        max_replicas=1,
        # Its tests are about the activator's held queue and per-replica limit, which only
        # requests in the activator's data path meet (not handed-off direct connections).
        direct_connections="false",
    )
    with_params(
        make_slow_execute(repo, "slow", delay_s=3.0, hold_file=hold_file(repo, "slow")),
        max_replicas=1,
    )
    with_params(make_broken(repo), activation_timeout_s=20)
    with_params(make_slow_init(repo, "slow_init", delay_s=3.0), activation_timeout_s=1)
    # A model whose config.pbtxt does not parse (reported unavailable, the rest served), and
    # stray entries a real repository directory collects.
    (repo / "badcfg" / "1").mkdir(parents=True)
    (repo / "badcfg" / "config.pbtxt").write_text('name: "badcfg"\ninput [ { name: \n')
    (repo / "README.md").write_text("not a model\n")
    (repo / ".cache").mkdir()
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
        "--max-body-bytes", str(MAX_BODY_BYTES),
        "--model-control-mode", "explicit",  # the load/unload tests' own
        "--load-model-at-zero=*",  # every model servable at zero, none woken at start
    )  # fmt: skip
    yield server
    server.stop()


@pytest.fixture(scope="module")
def serve(up_repo: Path) -> Iterator[ServeBeside]:
    """A direct `thaw serve` of the same repository, beside the session's `thaw up`."""
    server = ServeBeside(up_repo)
    yield server
    server.stop()
