"""Shared test fixtures: free ports, real `thaw serve` processes, tiny model repositories.

Builders live in `tests/fixtures/` (`model_repos.py`, `serve_process.py`) so any package's tests
can import them; the fixtures here wire them to pytest and kill every process they start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fakes.kube_fixtures import (  # noqa: F401  (fixtures, see tests/fakes/KUBERNETES.md)
    kube_api,
    kube_apiserver,
    kube_apiserver_factory,
    kubeconfig_path,
    kubelet,
    kubelet_factory,
)
from tests.fixtures.serve_process import ServeProcess, free_port


@pytest.fixture
def unused_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return free_port()


@pytest.fixture
def start_serve() -> Iterator[Callable[..., ServeProcess]]:
    """Start `thaw serve REPO --port 0 ARGS...` processes; all are stopped after the test."""
    started: list[ServeProcess] = []

    def start(repo: Path, *args: str, ready: bool = True) -> ServeProcess:
        server = ServeProcess(repo, *args)
        started.append(server)
        if ready:
            server.wait_ready()
        else:
            server.wait_listening()
        return server

    yield start
    for server in started:
        server.stop()
