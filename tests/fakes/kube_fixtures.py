"""Pytest fixtures for the fake Kubernetes API server and the test kubelet (imported by
tests/conftest.py, so every test can ask for them by name)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.kube_apiserver import FakeApiServerConfig, FakeKubeApiServer
from tests.fakes.kubelet import KubeletConfig, LocalKubelet

__all__ = [
    "eventually",
    "kube_api",
    "kube_apiserver",
    "kube_apiserver_factory",
    "kubeconfig_path",
    "kubelet",
    "kubelet_factory",
]


async def eventually(
    check: Callable[[], Any], *, timeout_s: float = 10.0, interval_s: float = 0.02
) -> Any:
    """Await until `check()` (sync or async) returns something truthy; return it. A check
    that never passes fails with its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s (last: {value!r})")
        await asyncio.sleep(interval_s)


@pytest.fixture
def kube_apiserver_factory() -> Iterator[Callable[..., FakeKubeApiServer]]:
    """`make(**FakeApiServerConfig fields)` -> a started server; all stopped after the test,
    and the test fails if the fake hit a bug of its own (answered as a 500)."""
    servers: list[FakeKubeApiServer] = []

    def make(**config: Any) -> FakeKubeApiServer:
        server = FakeKubeApiServer(FakeApiServerConfig(**config)).start()
        servers.append(server)
        return server

    yield make
    errors = [error for server in servers for error in server.internal_errors]
    for server in servers:
        server.stop()
    assert not errors, f"the fake API server hit bugs of its own: {errors}"


@pytest.fixture
def kube_apiserver(kube_apiserver_factory: Callable[..., FakeKubeApiServer]) -> FakeKubeApiServer:
    """A fresh fake API server (default config) on 127.0.0.1."""
    return kube_apiserver_factory()


@pytest.fixture
async def kube_api(kube_apiserver: FakeKubeApiServer) -> AsyncIterator[Any]:
    """A kubernetes-asyncio `ApiClient` for `kube_apiserver` (no kubeconfig involved)."""
    from kubernetes_asyncio.client import ApiClient

    async with ApiClient(kube_apiserver.client_configuration()) as api:
        yield api


@pytest.fixture
def kubeconfig_path(kube_apiserver: FakeKubeApiServer, tmp_path: Path) -> Path:
    """A kubeconfig file whose current context is `kube_apiserver` (namespace `default`)."""
    return kube_apiserver.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def kubelet_factory(
    kube_apiserver: FakeKubeApiServer, tmp_path: Path
) -> Iterator[Callable[..., LocalKubelet]]:
    """`make(**KubeletConfig fields)` -> a started kubelet on `kube_apiserver` (root under
    tmp_path); every kubelet and every process it started is stopped after the test."""
    kubelets: list[LocalKubelet] = []

    def make(**config: Any) -> LocalKubelet:
        index = len(kubelets) + 1
        config.setdefault("root", tmp_path / f"kubelet-{index}")
        config.setdefault("node_name", f"thaw-node-{index}")
        config.setdefault("probe_period_s", 0.2)
        kubelet = LocalKubelet(kube_apiserver.client_configuration(), KubeletConfig(**config))
        kubelets.append(kubelet)
        return kubelet.start()

    yield make
    failures = []
    for kubelet in kubelets:  # stop every one (and kill its processes) before reporting
        try:
            kubelet.stop()
        except RuntimeError as exc:
            failures.append(str(exc))
    assert not failures, failures


@pytest.fixture
def kubelet(kubelet_factory: Callable[..., LocalKubelet]) -> LocalKubelet:
    """One test kubelet (node `thaw-node-1`, probes every 0.2 s) on `kube_apiserver`."""
    return kubelet_factory()
