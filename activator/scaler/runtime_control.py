"""The control calls every scaler backend makes to a Thaw runtime over HTTP: ready? load, unload.

A runtime (`thaw serve --model-control-mode explicit`) started with no model is a warm-pool
member: `/v2/health/ready` is 200 once it runs. `load` posts the repository load call, which
returns only when the model is READY (restored from an image when the cache has one), or a
JSON `{"error": ...}`. The same client serves a local child process and a pod: a backend gives
it the runtime's base URL and races its calls against its own sign that the runtime is gone
(a process exit, a pod deleted). Every call has a deadline; each may be cancelled, which
closes its HTTP request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Callable, Mapping

import aiohttp

from activator.errors import ActivationFailed, RuntimeRefused
from thawwire.load_answer import WARMUP_SECONDS_HEADER, warmup_seconds

__all__ = ["RuntimeControl", "error_text", "grown_sources", "load_counts"]

_POLL_S = 0.05  # readiness poll period while a runtime starts
_PROBE_TIMEOUT = aiohttp.ClientTimeout(total=2)  # one readiness probe
_MAX_ERROR_BODY = 2000  # characters of an error answer kept for the message
_METRICS_TIMEOUT = aiohttp.ClientTimeout(total=2)  # one read of the runtime's /metrics
_LOADS = re.compile(r"^thaw_model_loads_total\{([^}]*)\}\s+([0-9.eE+]+)", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_RESIDENT = re.compile(r"^thaw_server_resident_memory_bytes\s+([0-9.eE+]+)", re.MULTILINE)
_MAX_BYTES = float(1 << 62)  # past this a byte count is no process's or device's
_GPU_TOTAL = re.compile(r"^nv_gpu_memory_total_bytes(?:\{[^}]*\})?\s+([0-9.eE+]+)", re.MULTILINE)
_GPU_USED = re.compile(r"^nv_gpu_memory_used_bytes(?:\{[^}]*\})?\s+([0-9.eE+]+)", re.MULTILINE)


class RuntimeControl:
    """Control client of one runtime at `url`; `name` says which in error messages."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        *,
        name: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url.rstrip("/")
        self.name = name
        self._session = session
        self._clock = clock

    async def wait_ready(self, deadline: float) -> None:
        """Poll `/v2/health/ready` until it answers 200; `ActivationFailed` once `deadline`
        (a time of `clock`) passes. Connection errors count as not ready yet."""
        while self._clock() < deadline:
            if await self.is_ready():
                return
            await asyncio.sleep(_POLL_S)
        raise ActivationFailed(f"replica {self.name} was not ready in time")

    async def is_ready(self) -> bool:
        """One readiness probe: `/v2/health/ready` answered 200 within 2 s."""
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            url = f"{self.url}/v2/health/ready"
            async with self._session.get(url, timeout=_PROBE_TIMEOUT) as resp:
                return resp.status == 200
        return False

    async def model_ready(self, model: str) -> bool:
        """Whether the runtime serves `model` now (`/v2/models/{model}/ready` is 200): how a
        runtime found running reports which model it holds."""
        return await self.model_answer(model) is True

    async def model_answer(self, model: str) -> bool | None:
        """The runtime's own word on `model`: True ready, False not (it answered otherwise);
        None when it did not answer (unreachable, timed out)."""
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            url = f"{self.url}/v2/models/{model}/ready"
            async with self._session.get(url, timeout=_PROBE_TIMEOUT) as resp:
                return resp.status == 200
        return None

    async def load(
        self, model: str, *, timeout_s: float, parameters: Mapping[str, str] | None = None
    ) -> float:
        """Load `model` (with the load call's `parameters`: a repository load's override);
        returns when the runtime says it is READY (with the seconds the model's warm-up
        samples took inside the load), else `ActivationFailed` (`RuntimeRefused` with the
        runtime's own error text when it answered: bad weights, missing file, ...)."""
        body = {"parameters": dict(parameters)} if parameters else {}
        return await self._post(model, "load", timeout_s, body)

    async def unload(self, model: str, *, timeout_s: float) -> None:
        """Unload `model` (a pod going back to the pool); `ActivationFailed` when refused."""
        await self._post(model, "unload", timeout_s)

    async def load_counts(self, model: str) -> dict[str, float] | None:
        """`model`'s loads so far by where their weights came from (`host`, `cache`, `store`,
        `files`), read off the runtime's `thaw_model_loads_total`; None when it did not
        answer. A backend compares two reads to learn the source of the load between them."""
        try:
            url = f"{self.url}/metrics"
            async with self._session.get(url, timeout=_METRICS_TIMEOUT) as resp:
                text = await resp.text()
        except (aiohttp.ClientError, TimeoutError):
            return None
        return load_counts(text, model)

    async def resident_bytes(self) -> int | None:
        """The runtime's resident memory with its child processes'
        (`thaw_server_resident_memory_bytes`); None when it did not answer or has no such
        series."""
        text = await self._metrics_text()
        match = _RESIDENT.search(text) if text is not None else None
        value = float(match.group(1)) if match is not None else -1.0
        return int(value) if 0 <= value < _MAX_BYTES else None

    async def gpu_memory(self) -> tuple[int, int] | None:
        """(total, used) bytes of the runtime's GPUs' memory, summed over its GPUs (Triton's
        `nv_gpu_memory_total_bytes` / `_used_bytes`); None when it did not answer or has no
        GPU."""
        text = await self._metrics_text()
        if text is None:
            return None
        total = sum(float(v) for v in _GPU_TOTAL.findall(text))
        used = sum(float(v) for v in _GPU_USED.findall(text))
        if not (0 < total < _MAX_BYTES and 0 <= used < _MAX_BYTES):
            return None  # no GPU, or a value no device has
        return int(total), int(used)

    async def _metrics_text(self) -> str | None:
        try:
            async with self._session.get(f"{self.url}/metrics", timeout=_METRICS_TIMEOUT) as resp:
                return await resp.text() if resp.status == 200 else None
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def _post(
        self, model: str, action: str, timeout_s: float, body: Mapping[str, object] | None = None
    ) -> float:
        url = f"{self.url}/v2/repository/models/{model}/{action}"
        try:
            timeout = aiohttp.ClientTimeout(total=timeout_s)
            async with self._session.post(url, json=body or {}, timeout=timeout) as resp:
                if resp.status == 200:
                    return warmup_seconds(resp.headers.get(WARMUP_SECONDS_HEADER))
                text = (await resp.text())[:_MAX_ERROR_BODY]
        except TimeoutError:
            raise ActivationFailed(
                f"model '{model}' did not {action} within {timeout_s:g} s"
            ) from None
        except aiohttp.ClientError as exc:
            raise ActivationFailed(f"model '{model}' {action} call failed: {exc}") from exc
        reason = error_text(text)
        raise RuntimeRefused(f"model '{model}' failed to {action}: {reason}", reason=reason)


def load_counts(metrics_text: str, model: str) -> dict[str, float]:
    """source -> count of `model`'s `thaw_model_loads_total` samples in a /metrics text."""
    found: dict[str, float] = {}
    for match in _LOADS.finditer(metrics_text):
        labels = dict(_LABEL.findall(match.group(1)))
        if labels.get("model") == model and "source" in labels:
            found[labels["source"]] = found.get(labels["source"], 0.0) + float(match.group(2))
    return found


def grown_sources(before: dict[str, float], after: dict[str, float]) -> list[str]:
    """The sources whose load count grew between two reads (one load: one of them)."""
    return sorted(source for source, n in after.items() if n > before.get(source, 0.0))


def error_text(body: str) -> str:
    """The message of a runtime's error answer: its JSON `error`, else the body itself."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip() or "(empty response)"
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return str(data["error"])
    return body.strip()
