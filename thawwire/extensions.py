"""The KServe v2 extensions Thaw implements, as `/v2` lists them (clients probe this list)."""

from __future__ import annotations

__all__ = ["EXTENSIONS"]

# Only what `thaw serve` implements; `thaw up` lists the same, since everything past its door
# is a replica's. (`schedule_policy` joins it when the scheduler implements dynamic-batching
# queue policies.) `trace`: settings and TIMESTAMPS records (docs/logging-and-tracing.md).
EXTENSIONS: tuple[str, ...] = (
    "classification",
    "model_repository",
    "model_repository(unload_dependents)",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "system_shared_memory",
    "logging",
    "trace",
)
