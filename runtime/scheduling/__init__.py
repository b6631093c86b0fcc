"""How a model version's requests run: Triton's dynamic batcher, sequence batcher, ensembles.

The pure parts (planner, policies, tables) take time as an argument; the rest drive them.

    model_scheduler     the one face every scheduler shows the ModelManager
    scheduler           a stateless model: inline when proven tiny and idle, else the dispatcher
    dispatcher          form a version's batches on the event loop, hand each to a free instance
    batch_planner       the pure batch planner: what one execution takes, or until when to wait
    queue_policy        the dynamic batcher's queue policies: priorities, limits, timeouts
    inline_policy       when a model's execute may run on the event loop
    instance_pool       which instances are free, and the batches formed while none was
    instance_worker     one instance's thread: runs the batches handed to it
    loop_instance       an instance driven from the event loop, one batch per slot
    batch_execution     execute one batch on one instance and account for it
    sequence_scheduler  a stateful model: each sequence on one instance, in order
    sequence_table      which instance and slot each live sequence holds
    sequence_controls   the control tensors a sequence model receives (START, END, ...)
    sequence_state      a stateful model's implicit state: fed as inputs, kept from outputs
    ensemble_scheduler  an ensemble: each step as soon as the tensors it reads exist
    ensemble_flows      an ensemble with decoupled steps: each streamed response flows on alone
    ensemble_batching   a tensor between a batching and a non-batching model: its shape
    request_parameters  an infer request's scheduling parameters, read Triton's way
    response_stream     a decoupled request's responses, read as an async iterator
    clock               the scheduler's time: a nanosecond reading and timers, injected
    rate_limit          the rate limiter's resources: what loaded instances may hold at once
    resource_gate       an instance executes only while it holds its rate_limiter resources

Exports the three schedulers and the face they share: `ModelScheduler`, `Scheduler`,
`SequenceScheduler`, `EnsembleScheduler`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.scheduling.ensemble_scheduler import EnsembleScheduler
    from runtime.scheduling.model_scheduler import ModelScheduler
    from runtime.scheduling.scheduler import Scheduler
    from runtime.scheduling.sequence_scheduler import SequenceScheduler

__all__ = ["EnsembleScheduler", "ModelScheduler", "Scheduler", "SequenceScheduler"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "EnsembleScheduler": "runtime.scheduling.ensemble_scheduler",
    "ModelScheduler": "runtime.scheduling.model_scheduler",
    "Scheduler": "runtime.scheduling.scheduler",
    "SequenceScheduler": "runtime.scheduling.sequence_scheduler",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
