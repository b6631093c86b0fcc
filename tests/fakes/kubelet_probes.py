"""The test kubelet's container probes: httpGet, tcpSocket and exec, with the real fields
(initialDelaySeconds, periodSeconds, timeoutSeconds, successThreshold, failureThreshold) and the
real rule that a verdict flips only after that many consecutive results."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from tests.fakes.kubelet_container import ContainerConfigError

__all__ = ["ContainerProber", "ProbeSpec", "ProbeTracker", "run_probe"]

logger = logging.getLogger(__name__)

ExecIn = Callable[[Sequence[str], float], Awaitable[bool]]  # argv, timeout_s -> exit 0


@dataclass(frozen=True)
class ProbeSpec:
    """One probe of a container, resolved against its ports."""

    action: str  # "httpGet" | "tcpSocket" | "exec"
    port: int
    path: str
    host: str | None
    headers: tuple[tuple[str, str], ...]
    command: tuple[str, ...]
    initial_delay_s: float
    period_s: float
    timeout_s: float
    success_threshold: int
    failure_threshold: int

    @classmethod
    def parse(
        cls,
        probe: Mapping[str, Any],
        container: Mapping[str, Any],
        *,
        period_s: float | None,
        keep_failure_window: bool = False,
    ) -> ProbeSpec:
        """`period_s` overrides periodSeconds (tests use a fast kubelet). With
        `keep_failure_window` (liveness and startup probes) failureThreshold grows to match, so
        a container still has periodSeconds x failureThreshold to come up before it is killed:
        probing faster must not kill a container a real kubelet would leave alone."""
        named = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
        action = next((a for a in ("httpGet", "tcpSocket", "exec") if a in probe), None)
        if action is None:
            raise ContainerConfigError(
                f"unsupported probe {sorted(probe)}: the test kubelet "
                "runs httpGet, tcpSocket and exec probes"
            )
        handler = probe[action]
        port = handler.get("port", 0)
        if isinstance(port, str) and not port.isdigit():
            if port not in named:
                raise ContainerConfigError(f"probe port {port!r} names no container port")
            port = named[port]
        manifest_period_s = float(probe.get("periodSeconds", 10))
        failure_threshold = int(probe.get("failureThreshold", 3))
        if keep_failure_window and period_s:
            window_s = manifest_period_s * failure_threshold
            failure_threshold = max(failure_threshold, math.ceil(window_s / period_s))
        if action == "httpGet" and handler.get("scheme", "HTTP") != "HTTP":
            raise ContainerConfigError("the test kubelet probes over plain HTTP only")
        return cls(
            action=action,
            port=int(port),
            path=handler.get("path", "/"),
            host=handler.get("host"),
            headers=tuple((h["name"], h["value"]) for h in handler.get("httpHeaders") or []),
            command=tuple(handler.get("command") or ()),
            initial_delay_s=float(probe.get("initialDelaySeconds", 0)),
            period_s=period_s if period_s is not None else manifest_period_s,
            timeout_s=float(probe.get("timeoutSeconds", 1)),
            success_threshold=int(probe.get("successThreshold", 1)),
            failure_threshold=failure_threshold,
        )


class ProbeTracker:
    """The current verdict of a probe from its consecutive results."""

    def __init__(self, spec: ProbeSpec, *, initial: bool) -> None:
        self.spec = spec
        self.passing = initial
        self._successes = 0
        self._failures = 0

    def observe(self, ok: bool) -> bool:
        """Record one result; True when the verdict changed."""
        if ok:
            self._successes, self._failures = self._successes + 1, 0
            flip = not self.passing and self._successes >= self.spec.success_threshold
        else:
            self._successes, self._failures = 0, self._failures + 1
            flip = self.passing and self._failures >= self.spec.failure_threshold
        if flip:
            self.passing = not self.passing
        return flip

    @property
    def failed_out(self) -> bool:
        """At least failureThreshold consecutive failures (liveness/startup: restart)."""
        return self._failures >= self.spec.failure_threshold


async def run_probe(spec: ProbeSpec, *, pod_ip: str, session: aiohttp.ClientSession) -> bool:
    """One httpGet (status 200-399) or tcpSocket (a connect) attempt within timeoutSeconds;
    exec probes run inside the container (`kubelet_runtime.Container.exec`)."""
    host = spec.host or pod_ip
    try:
        if spec.action == "httpGet":
            url = f"http://{host}:{spec.port}{spec.path}"
            timeout = aiohttp.ClientTimeout(total=spec.timeout_s)
            async with session.get(
                url, headers=dict(spec.headers), timeout=timeout, allow_redirects=False
            ) as response:
                return 200 <= response.status < 400
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, spec.port), spec.timeout_s)
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True
    except (aiohttp.ClientError, OSError, TimeoutError):
        return False


class ContainerProber:
    """A running container's probes, as the kubelet runs them: the startup probe until it
    passes (then `started`), then readiness and liveness side by side. `on_change(started,
    ready)` is awaited on each change; `failed` is set when liveness or startup fails out (the
    kubelet then kills the container). Exec probes run through `exec_in` (inside the container)."""

    def __init__(
        self,
        container: Mapping[str, Any],
        *,
        period_s: float | None,
        pod_ip: str,
        session: aiohttp.ClientSession,
        exec_in: ExecIn,
        on_change: Callable[[bool, bool], Awaitable[None]],
        who: str,
    ) -> None:
        self.specs = {
            kind: ProbeSpec.parse(
                container[kind],
                container,
                period_s=period_s,
                keep_failure_window=kind != "readinessProbe",
            )
            for kind in ("startupProbe", "readinessProbe", "livenessProbe")
            if isinstance(container.get(kind), dict)
        }
        self._pod_ip, self._session = pod_ip, session
        self._exec_in, self._on_change, self._who = exec_in, on_change, who

    async def run(self, failed: asyncio.Event) -> None:
        startup = self.specs.get("startupProbe")
        if startup is not None and not await self._until_passing(startup, "startupProbe"):
            failed.set()
            return
        await self._on_change(True, "readinessProbe" not in self.specs)
        loops = [
            self._loop(self.specs[kind], kind, failed)
            for kind in ("readinessProbe", "livenessProbe")
            if kind in self.specs
        ]
        await asyncio.gather(*loops)

    async def _attempt(self, spec: ProbeSpec) -> bool:
        if spec.action == "exec":
            return bool(spec.command) and await self._exec_in(spec.command, spec.timeout_s)
        return await run_probe(spec, pod_ip=self._pod_ip, session=self._session)

    async def _until_passing(self, spec: ProbeSpec, kind: str) -> bool:
        tracker = ProbeTracker(spec, initial=False)
        await asyncio.sleep(spec.initial_delay_s)
        while True:
            tracker.observe(await self._attempt(spec))
            if tracker.passing:
                return True
            if tracker.failed_out:
                logger.info("%s: %s failed, killing its container", self._who, kind)
                return False
            await asyncio.sleep(spec.period_s)

    async def _loop(self, spec: ProbeSpec, kind: str, failed: asyncio.Event) -> None:
        tracker = ProbeTracker(spec, initial=kind == "livenessProbe")
        await asyncio.sleep(spec.initial_delay_s)
        while True:
            changed = tracker.observe(await self._attempt(spec))
            if kind == "readinessProbe" and changed:
                await self._on_change(True, tracker.passing)
            if kind == "livenessProbe" and tracker.failed_out:
                logger.info("%s: livenessProbe failed, killing its container", self._who)
                failed.set()
                return
            await asyncio.sleep(spec.period_s)
