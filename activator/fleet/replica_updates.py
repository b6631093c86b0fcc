"""An instance update in place, sent to a model's replicas: each routable replica gets the
model's load (with a load's `config` override, if any) at once, and their answers are gathered
(activator.fleet.in_place decides whether a change is one; this module carries it out)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import aiohttp

from activator.endpoint.model_endpoint import ModelEndpoint
from activator.endpoint.replica import Replica
from activator.errors import ActivationFailed, RuntimeRefused
from activator.fleet.in_place import Updates
from activator.scaler.runtime_control import RuntimeControl

__all__ = ["update_replicas"]

logger = logging.getLogger(__name__)


async def update_replicas(
    session: aiohttp.ClientSession,
    endpoint: ModelEndpoint,
    name: str,
    parameters: Mapping[str, str] | None = None,
) -> Updates:
    """Send `name`'s load (with `parameters`: a load's `config` override) to each of its
    routable replicas at once, for each to take its change in place (instance groups,
    versions: activator.fleet.in_place), and gather their answers; a replica still starting is
    stopped once up, unused. None up: nothing to send."""
    timeout_s = endpoint.settings.start_timeout_s  # a load, as a replica start's

    async def load(replica: Replica) -> None:
        control = RuntimeControl(session, replica.url, name=replica.id)
        await control.load(name, timeout_s=timeout_s, parameters=parameters)

    replicas = endpoint.keep_replicas()
    answers = await asyncio.gather(*(load(r) for r in replicas), return_exceptions=True)
    refused, failed = [], []
    for replica, answer in zip(replicas, answers, strict=True):
        if isinstance(answer, RuntimeRefused):
            refused.append(answer.reason)
        elif isinstance(answer, ActivationFailed):
            failed.append(answer.message)
        elif isinstance(answer, BaseException):
            raise answer
        logger.debug("model=%s replica %s update in place: %s", name, replica.id,
                     "done" if answer is None else answer)  # fmt: skip
    updated = len(replicas) - len(refused) - len(failed)
    return Updates(updated, tuple(refused), tuple(failed))
