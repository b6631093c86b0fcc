"""Configs only a replica can complete: a python model's own `auto_complete_config`.

That hook is the model's code, which the activator never runs. For such a model
(`ModelEntry.replica_completes`) the first config or metadata request wakes it as an infer
does (a slot of the endpoint's admission: held, woken, refused with the same errors), asks
the replica for `/v2/models/{m}[/versions/{v}]/config` and keeps the answer: every later
answer, at zero replicas too, comes from it. One fetch per model at a time; a failed one is
not kept (the next request asks again).
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from google.protobuf import json_format

from activator.endpoint.model_endpoint import ModelEndpoint
from activator.errors import UpstreamFailed, UpstreamTimeout
from activator.fleet.repository import ModelEntry
from tritonconfig.schema import mc

__all__ = ["ReplicaConfigs"]

logger = logging.getLogger(__name__)

_SHOWN = 300  # characters of a replica's error body quoted in ours


class ReplicaConfigs:
    """The completed configs asked of replicas, by model, for the life of `thaw up`."""

    def __init__(self, session: aiohttp.ClientSession, *, timeout_s: float) -> None:
        self._session = session
        self._timeout_s = timeout_s
        self._configs: dict[str, mc.ModelConfig] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def known(self, model: str) -> mc.ModelConfig | None:
        """The config a replica completed for `model`, if one was asked already."""
        return self._configs.get(model)

    def forget(self, model: str) -> None:
        """`model`'s files changed: its config is asked of a replica again when needed."""
        self._configs.pop(model, None)

    async def completed(
        self, entry: ModelEntry, endpoint: ModelEndpoint, version: str | None
    ) -> mc.ModelConfig:
        """The config a replica serves `entry` with (`entry.config` when the activator's own
        completion is a replica's); the first call wakes the model and asks a replica."""
        if not entry.replica_completes:
            return entry.config
        lock = self._locks.setdefault(entry.name, asyncio.Lock())
        async with lock:
            config = self._configs.get(entry.name)
            if config is None:
                config = await self._ask(entry.name, endpoint, version)
                self._configs[entry.name] = config
                logger.info("model=%s config completed by a replica, kept", entry.name)
            return config

    async def _ask(
        self, model: str, endpoint: ModelEndpoint, version: str | None
    ) -> mc.ModelConfig:
        path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/config"
        async with endpoint.acquire(0) as replica:
            try:
                timeout = aiohttp.ClientTimeout(total=self._timeout_s)
                async with self._session.get(replica.url + path, timeout=timeout) as resp:
                    status, body = resp.status, await resp.read()
            except TimeoutError:
                raise UpstreamTimeout(
                    f"model '{model}': the replica's config did not come within "
                    f"{self._timeout_s:g}s"
                ) from None
            except aiohttp.ClientError as exc:
                message = f"model '{model}': asking a replica for its config failed: {exc}"
                endpoint.replica_failed(replica, message)
                raise UpstreamFailed(message) from None
        text = body.decode("utf-8", "replace")
        if status != 200:
            raise UpstreamFailed(
                f"model '{model}': a replica answered {status} for its config: {text[:_SHOWN]}"
            )
        config = mc.ModelConfig()
        try:
            json_format.Parse(text, config)
        except json_format.ParseError as exc:
            raise UpstreamFailed(
                f"model '{model}': a replica's config is not a ModelConfig: {exc}"
            ) from None
        return config
