"""The KServe v2 extensions Thaw implements, as `/v2` lists them (clients probe this list)."""

from __future__ import annotations

__all__ = ["EXTENSIONS"]

# Only what `thaw serve` implements; `thaw up` lists the same, since everything past its door
# is a replica's. Triton 2.51's list and order (GET /v2, observed): `sequence` (sequence
# batching), `schedule_policy` (dynamic batching's queue policies), `cuda_shared_memory`
# (answered as a Triton without GPUs answers it: docs/shared-memory.md), `trace` (settings and
# TIMESTAMPS records: docs/logging-and-tracing.md).
EXTENSIONS: tuple[str, ...] = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)
