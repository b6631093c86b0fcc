"""A ScalerBackend with behaviour, for endpoint and app tests without processes."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from activator.errors import ActivationFailed, StartWithdrawn
from activator.scaler.backend import PoolStatus, ReplicaHandle

__all__ = ["WAKE_DEADLINE_S", "FakeScalerBackend"]

# The activation deadline of tests that wake a model and expect it to serve: a fake start takes
# milliseconds, but a machine loaded by a second test run beside this one can stall the loop
# for seconds, and a short deadline then answers 504 where the test expects 200. Tests of the
# deadline itself set their own short one.
WAKE_DEADLINE_S = 30.0


class FakeScalerBackend:
    """Implements `activator.scaler.backend.ScalerBackend`; the test drives it:

    - every start waits for `gate` (open it with `gate.set()`, or `open_gate=True`), up to
      its timeout (then `ActivationFailed`), then fails with `fail_with` when that is set
      (or, a start whose load parameters hold a key of `refuse_parameter`, with its error),
      or the next start is withdrawn (`StartWithdrawn`, once) with `withdraw_with` when that
      is set;
    - the n-th start call's replica is `<model>-<n>` at `url` (`{id}` is replaced by the id);
    - `lose(id, reason)` makes the replica die (its `wait_lost` returns `reason`);
    - `running` is what `running_replicas` reports (replicas found running at start);
    - `pool` is what `pool_status` answers;
    - with `host`, every replica is room in that shared runtime (`ReplicaHandle.host`).

    It records `starts` (start calls so far), `stopped` (ids, in order) and `loaded_with`
    (each start's load parameters, `set_load_parameters`' for its model: a load's override),
    and sets `start_called` on every start call.
    """

    def __init__(
        self,
        *,
        url: str = "http://fake/{id}",
        open_gate: bool = False,
        fail_with: str | None = None,
        claim_s: float = 0.01,
        restore_s: float = 0.02,
        host: str | None = None,
    ) -> None:
        self.url = url
        self.host = host
        self.gate = asyncio.Event()
        if open_gate:
            self.gate.set()
        self.fail_with = fail_with
        self.withdraw_with: str | None = None
        self.claim_s = claim_s
        self.restore_s = restore_s
        self.starts = 0
        self.start_called = asyncio.Event()
        self.stopped: list[str] = []
        self.lost: dict[str, asyncio.Future[str]] = {}
        self.running: dict[str, list[ReplicaHandle]] = {}
        self.pool = PoolStatus(size=0, ready=0)
        self.parameters: dict[str, dict[str, str]] = {}
        self.loaded_with: list[dict[str, str] | None] = []
        # Load parameter key -> the error of a start whose load parameters hold that key.
        self.refuse_parameter: dict[str, str] = {}

    def set_load_parameters(self, model: str, parameters: Mapping[str, str] | None) -> None:
        if parameters:
            self.parameters[model] = dict(parameters)
        else:
            self.parameters.pop(model, None)

    async def start_replica(self, model: str, *, timeout_s: float) -> ReplicaHandle:
        self.starts += 1
        self.loaded_with.append(self.parameters.get(model))
        replica_id = f"{model}-{self.starts}"
        self.start_called.set()
        try:
            await asyncio.wait_for(self.gate.wait(), timeout_s)
        except TimeoutError:
            raise ActivationFailed("replica did not start in time") from None
        if self.fail_with:
            raise ActivationFailed(self.fail_with)
        for key in self.parameters.get(model) or {}:
            if key in self.refuse_parameter:
                raise ActivationFailed(self.refuse_parameter[key])
        if self.withdraw_with:
            reason, self.withdraw_with = self.withdraw_with, None
            raise StartWithdrawn(reason)
        self.lost[replica_id] = asyncio.get_running_loop().create_future()
        url = await self.serve(replica_id)
        return ReplicaHandle(replica_id, model, url, self.claim_s, self.restore_s, host=self.host)

    async def serve(self, replica_id: str) -> str:
        """Where the new replica answers (a subclass may start a server here)."""
        return self.url.format(id=replica_id)

    def lose(self, replica_id: str, reason: str) -> None:
        """The replica dies on its own."""
        self.lost[replica_id].set_result(reason)

    async def running_replicas(self, model: str) -> list[ReplicaHandle]:
        handles = self.running.get(model, [])
        for handle in handles:
            self.lost.setdefault(handle.id, asyncio.get_running_loop().create_future())
        return list(handles)

    async def wait_lost(self, replica_id: str) -> str:
        lost = self.lost.get(replica_id)
        return "stopped" if lost is None else await asyncio.shield(lost)

    async def stop_replica(self, replica_id: str, *, timeout_s: float) -> None:
        self.stopped.append(replica_id)

    def pool_status(self) -> PoolStatus:
        return self.pool

    async def close(self) -> None:
        for lost in self.lost.values():
            if not lost.done():
                lost.cancel()
