"""What the servers' surfaces (REST, gRPC) call on the models: the ModelService Protocol.

runtime.models.manager.ModelManager implements it; runtime.http and runtime.grpc depend on
this Protocol only, so neither surface imports the other or the manager.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from runtime.config import ServeConfig
from runtime.inference import InferRequest, InferResponse
from runtime.models.lifecycle import ServerState

__all__ = ["ModelService", "StreamingModelService", "server_live", "server_ready"]


class ModelService(Protocol):
    """The part of runtime.models.manager.ModelManager the HTTP surface calls."""

    def prepare(self) -> None:
        """What a load call needs, in place before the frameworks' preload (the port answers
        from the first moment, so a load may come while they import)."""
        ...

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def is_ready(self) -> bool: ...
    async def index(self, *, ready_only: bool = False) -> list[dict[str, Any]]: ...
    async def load(
        self, name: str, *, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> float | None:
        """Load (or reload) a model; the seconds its warm-up samples took, if it has any."""
        ...

    async def unload(self, name: str, *, unload_dependents: bool = False) -> None: ...
    async def register_repository(self, root: Path, mapping: Mapping[str, str]) -> None:
        """Serve `root`'s models too, `mapping` naming some by their subdirectories (Triton's
        RegisterModelRepository: SageMaker's multi-model endpoint)."""
        ...

    async def unregister_repository(self, root: Path) -> None: ...
    def model_ready(self, name: str, version: str | None) -> bool: ...
    def metadata(self, name: str, version: str | None) -> dict[str, Any]: ...
    def config(self, name: str, version: str | None) -> dict[str, Any]: ...
    def statistics(self, name: str | None, version: str | None) -> dict[str, Any]: ...
    async def infer(self, request: InferRequest) -> InferResponse: ...
    def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]: ...

    def answers_as_they_come(self, name: str, version: str | None) -> bool:
        """Whether a stream's answers for this model may leave out of request order."""
        ...


class StreamingModelService(ModelService, Protocol):
    """The ModelService of the REST surface, plus the stream of one request's responses."""

    def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]: ...

    def answers_as_they_come(self, name: str, version: str | None) -> bool:
        """Whether a stream's answers for this model may leave out of request order."""
        ...


def server_live(state: ServerState) -> bool:
    """Triton's server liveness: false once the start has failed (a server kept serving by
    `--exit-on-error=false` after it failed to initialize answers, neither live nor ready)."""
    return state.start_error is None


def server_ready(config: ServeConfig, manager: ModelService, state: ServerState) -> bool:
    """Triton's server readiness: started and not stopping, and (`strict_readiness`, the
    default) every model that should be loaded is READY. Both protocols answer this."""
    return state.accepting and (not config.strict_readiness or manager.is_ready())
