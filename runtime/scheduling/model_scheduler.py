"""The one face every scheduler of a model version shows the ModelManager.

Scheduler (runtime.scheduling.scheduler)                  stateless models, dynamic batching
SequenceScheduler (runtime.scheduling.sequence_scheduler) stateful models (`sequence_batching`)
EnsembleScheduler (runtime.scheduling.ensemble_scheduler) `platform: "ensemble"`
"""

from __future__ import annotations

from typing import Protocol

from runtime.inference import InferRequest, InferResponse
from runtime.scheduling.request_parameters import SchedulingParameters

__all__ = ["ModelScheduler"]


class ModelScheduler(Protocol):
    """Runs one model version's requests; `submit` on the event loop only."""

    def pending(self) -> int:
        """Requests accepted and not yet executing (`nv_inference_pending_request_count`)."""
        ...

    async def submit(
        self,
        request: InferRequest,
        *,
        batch_size: int,
        received_ns: int,
        params: SchedulingParameters,
    ) -> InferResponse:
        """Run a validated request; its ServingError when it fails or is refused."""
        ...

    def close(self) -> None:
        """Refuse new requests (on the event loop); those accepted still run."""
        ...

    def join(self) -> None:
        """Wait until everything accepted has run and the workers are gone (blocking)."""
        ...
