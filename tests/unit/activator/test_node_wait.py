"""Requests held through node provisioning (issue 22): while the backend says a start waits
for a node (`NodeWait`), held requests outlast the activation timeout and the model's state
says "waiting for a node"; without it, the activation timeout holds as before."""

from __future__ import annotations

import asyncio
import time

import pytest

from activator.config import ScaleSettings
from activator.endpoint.model_endpoint import ModelEndpoint
from activator.errors import HeldTimeout
from activator.observe.metrics import Metrics
from activator.observe.status_document import ModelState
from activator.scaler.backend import NodeWait, ReplicaHandle
from tests.fakes.loop import turns
from tests.fakes.scaler_backend import FakeScalerBackend

SETTINGS = ScaleSettings(activation_timeout_s=0.5, scale_to_zero_grace_s=30)


class NodeWaitingBackend(FakeScalerBackend):
    """A fake backend whose starts wait for a node until `hold` (monotonic time) or None."""

    def __init__(self) -> None:
        super().__init__()
        self.hold: float | None = None

    async def start_replica(self, model: str, *, timeout_s: float) -> ReplicaHandle:
        # A start waiting for a node outlasts the activation timeout (as the Kubernetes
        # backend's does, tests/integration/kubernetes/test_kube_node_provisioning.py).
        wait_s = 60.0 if self.hold is not None else timeout_s
        return await super().start_replica(model, timeout_s=wait_s)

    def waiting_for_node(self, model: str) -> bool:
        return self.hold is not None

    def hold_until(self, model: str) -> float | None:
        return self.hold


async def _request(endpoint: ModelEndpoint) -> str:
    async with endpoint.acquire(0) as replica:
        return replica.id


async def test_a_request_is_held_past_the_activation_timeout_while_a_node_is_provisioned() -> None:
    backend = NodeWaitingBackend()
    assert isinstance(backend, NodeWait)
    endpoint = ModelEndpoint("m", SETTINGS, backend, Metrics(), clock=time.monotonic)
    backend.hold = time.monotonic() + 60  # the pod is Pending, Unschedulable
    held = asyncio.ensure_future(_request(endpoint))
    await backend.start_called.wait()
    assert endpoint.state is ModelState.WAITING_FOR_NODE
    assert endpoint.status().state.value == "waiting for a node"
    await asyncio.sleep(SETTINGS.activation_timeout_s * 2)  # past it: before, a 504 here
    assert not held.done()
    backend.hold = None
    backend.gate.set()  # the node joined; the pod came up
    assert await asyncio.wait_for(held, 5) == "m-1"
    assert endpoint.state is ModelState.WARM
    await endpoint.close()


async def test_without_a_node_wait_the_activation_timeout_holds() -> None:
    backend = NodeWaitingBackend()
    endpoint = ModelEndpoint("m", SETTINGS, backend, Metrics(), clock=time.monotonic)
    held = asyncio.ensure_future(_request(endpoint))
    await turns()
    assert endpoint.state is ModelState.WAKING
    with pytest.raises(HeldTimeout):
        await asyncio.wait_for(held, 5)
    backend.gate.set()
    await endpoint.close()
