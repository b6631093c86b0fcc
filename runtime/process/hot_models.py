"""Which model versions the native front answers itself (decision 0032, phase 2), kept in step
with what this server serves.

    hot_row(config, ...) ─▶ the row the front is told, or None: the version stays Python's
    HotModels.run() ─ every TICK_S ─▶ new hot versions (or new instances): relay their stubs,
                                     `serve`; gone ones: `retire` (each instance's unload
                                     retires it first itself, runtime.python.stub_backend)

A version is hot when every request the front could answer for it needs nothing but its
stub: a Python model in stub processes, not decoupled, no sequence or dynamic batcher, no
response cache, no passive instance or rate limiter, inputs of fixed numeric types without
reshape, optional or shape-tensor inputs; outputs numeric or BYTES; and a server that forwards
no headers to models, restricts no route, keeps no latency summaries and uses no model
namespaces. While the log is verbose (a line per request, the server's to write), the front
forwards every infer. The front takes
only requests it can check in full, and forwards the rest (runtime.process.native_front).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from runtime.config import ServeConfig
from runtime.models.manager import ModelManager
from runtime.process.front_control import FrontControl
from thawserver.fast_json import HAVE_ORJSON
from thawwire.datatype_names import config_to_v2
from tritonconfig.schema import mc

__all__ = ["TICK_S", "HotModels", "hot_row"]

logger = logging.getLogger(__name__)

TICK_S = 0.25  # how soon a newly loaded version is answered by the front

_INPUT_TYPES = frozenset(
    {"FP32", "FP64", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64",
     "BOOL"}
)  # fmt: skip
_OUTPUT_TYPES = _INPUT_TYPES | {"BYTES"}
_MIN_BODY_BYTES = 1 << 20  # the front takes bodies up to 1 MiB


def _datatype(value: int) -> str:
    return config_to_v2(mc.DataType.Name(value))


def server_allows(config: ServeConfig) -> bool:
    """Whether this server's settings leave anything to the front (else no version is hot)."""
    return (
        not config.http_header_forward_pattern
        # Restricted routes need their header checked: the server's to do.
        and not config.http_restricted_apis
        and not config.metrics_settings.summary_latencies
        and not config.model_namespacing
        and config.rate_limit == "off"
        and config.max_body_bytes >= _MIN_BODY_BYTES
    )


def hot_row(
    name: str,
    version: str,
    config: mc.ModelConfig,
    *,
    unversioned: bool,
    instances: int,
    stubs: int,
) -> dict[str, Any] | None:
    """The front's row for a serving version (`stubs`: how many of its `instances` run in stub
    processes), or None when the front must leave it to this server."""
    if (
        config.backend != "python"
        or stubs == 0
        or stubs != instances
        or config.model_transaction_policy.decoupled
        or config.HasField("sequence_batching")
        or config.HasField("dynamic_batching")
        or config.response_cache.enable
        or any(g.passive or g.rate_limiter.resources for g in config.instance_group)
    ):
        return None
    inputs = []
    for tensor in config.input:
        datatype = _datatype(tensor.data_type)
        if (
            datatype not in _INPUT_TYPES
            or tensor.optional
            or tensor.is_shape_tensor
            or tensor.allow_ragged_batch
            or tensor.HasField("reshape")
            or any(dim < -1 for dim in tensor.dims)
        ):
            return None
        inputs.append({"name": tensor.name, "datatype": datatype, "dims": list(tensor.dims)})
    outputs = []
    for tensor in config.output:
        datatype = _datatype(tensor.data_type)
        if datatype not in _OUTPUT_TYPES or tensor.HasField("reshape"):
            return None
        outputs.append({"name": tensor.name, "datatype": datatype})
    if not inputs or not outputs:
        return None
    return {
        "model": name,
        "version": version,
        "unversioned": unversioned,
        "max_batch_size": config.max_batch_size,
        "inputs": inputs,
        "outputs": outputs,
        # The front writes JSON as this server does (thawserver.fast_json): orjson's text
        # where it is installed, else the stdlib's.
        "stdlib_json": not HAVE_ORJSON,
    }


class HotModels:
    """Tells the front which versions are hot, as versions load and go."""

    def __init__(self, control: FrontControl, manager: ModelManager, config: ServeConfig) -> None:
        self._control = control
        self._manager = manager
        self._allowed = server_allows(config)
        # (model, version) -> (the row served, the instances relayed for it)
        self._served: dict[tuple[str, str], tuple[dict[str, Any], frozenset[int]]] = {}

    async def run(self) -> None:
        """Keep the front's rows in step until cancelled (or the front is gone)."""
        if not self._allowed:
            return
        while not self._control.closed:
            try:
                # `--log-verbose`, or set so by the logging API since the last pass.
                verbose = logging.getLogger().isEnabledFor(logging.DEBUG)
                self._control.pause("verbose log", verbose)
                await self.reconcile()
            except ConnectionError as exc:
                logger.warning("the native front's hot models: %s", exc)
                return
            await asyncio.sleep(TICK_S)

    async def reconcile(self) -> None:
        """One pass: serve what became hot, retire what is gone."""
        wanted: dict[tuple[str, str], tuple[dict[str, Any], list[Any]]] = {}
        for name, loaded, unversioned in self._manager.serving_versions():
            stubs = [s for s in (getattr(i, "stub", None) for i in loaded.instances) if s]
            row = hot_row(
                name, loaded.version, loaded.config, unversioned=unversioned,
                instances=len(loaded.instances), stubs=len(stubs),
            )  # fmt: skip
            if row is not None:
                wanted[(name, loaded.version)] = (row, stubs)
        for key in [k for k in self._served if k not in wanted]:
            del self._served[key]
            with contextlib.suppress(TimeoutError):
                await self._control.retire(*key)
        for key, (row, stubs) in wanted.items():
            ids = frozenset(id(stub) for stub in stubs)
            served = self._served.get(key)
            if served is not None and served == (row, ids):
                continue
            relayed = served[1] if served is not None else frozenset()
            for stub in stubs:
                if id(stub) not in relayed:
                    await stub.relay_through(self._control)
            self._control.serve(row)
            self._served[key] = (row, ids)
            logger.info("model=%s version=%s: the native front answers its infers", *key)
