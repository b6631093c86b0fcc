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
import time
from collections.abc import Callable

import aiohttp

from activator.errors import ActivationFailed
from thawwire.load_answer import WARMUP_SECONDS_HEADER, warmup_seconds

__all__ = ["RuntimeControl", "error_text"]

_POLL_S = 0.05  # readiness poll period while a runtime starts
_PROBE_TIMEOUT = aiohttp.ClientTimeout(total=2)  # one readiness probe
_MAX_ERROR_BODY = 2000  # characters of an error answer kept for the message


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
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            url = f"{self.url}/v2/models/{model}/ready"
            async with self._session.get(url, timeout=_PROBE_TIMEOUT) as resp:
                return resp.status == 200
        return False

    async def load(self, model: str, *, timeout_s: float) -> float:
        """Load `model`; returns when the runtime says it is READY (with the seconds the
        model's warm-up samples took inside the load), else `ActivationFailed` with the
        runtime's own error text (bad weights, missing file, ...)."""
        return await self._post(model, "load", timeout_s)

    async def unload(self, model: str, *, timeout_s: float) -> None:
        """Unload `model` (a pod going back to the pool); `ActivationFailed` when refused."""
        await self._post(model, "unload", timeout_s)

    async def _post(self, model: str, action: str, timeout_s: float) -> float:
        url = f"{self.url}/v2/repository/models/{model}/{action}"
        try:
            timeout = aiohttp.ClientTimeout(total=timeout_s)
            async with self._session.post(url, json={}, timeout=timeout) as resp:
                if resp.status == 200:
                    return warmup_seconds(resp.headers.get(WARMUP_SECONDS_HEADER))
                text = (await resp.text())[:_MAX_ERROR_BODY]
        except TimeoutError:
            raise ActivationFailed(
                f"model '{model}' did not {action} within {timeout_s:g} s"
            ) from None
        except aiohttp.ClientError as exc:
            raise ActivationFailed(f"model '{model}' {action} call failed: {exc}") from exc
        raise ActivationFailed(f"model '{model}' failed to {action}: {error_text(text)}")


def error_text(body: str) -> str:
    """The message of a runtime's error answer: its JSON `error`, else the body itself."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip() or "(empty response)"
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return str(data["error"])
    return body.strip()
