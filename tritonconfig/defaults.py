"""The fields Triton fills in a config before it reports or serves it (observed on 2.51)."""

from __future__ import annotations

from collections.abc import Sequence

from tritonconfig.ensemble import is_ensemble
from tritonconfig.schema import mc
from tritonconfig.sequence import SEQUENCE_IDLE_DEFAULT_US

__all__ = ["fill_defaults"]


def fill_defaults(
    config: mc.ModelConfig, *, gpu_available: bool, gpus: Sequence[int] = (0,)
) -> None:
    """Version policy, instance groups (named, counted, placed), default python file name,
    pinned memory, the preferred batch sizes and the sequence idle time, where the config
    leaves them unset. `gpus`: the GPUs the server found (Triton's rule: a `KIND_AUTO` group
    is `KIND_GPU` when there is one, and a GPU group that names none gets all of them). An
    ensemble gets only its version policy (and its empty transaction policy): it has no
    instances and no optimization of its own (Triton refuses either there)."""
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if is_ensemble(config):
        # Triton reports an ensemble's transaction policy, empty, as set (qa/L0_model_config's
        # completed ensemble config holds `model_transaction_policy { }`).
        config.model_transaction_policy.SetInParent()
        return
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        if sequence.max_sequence_idle_microseconds == 0:
            sequence.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_US
        oldest = sequence.oldest if sequence.HasField("oldest") else None
        if oldest is not None and config.max_batch_size > 0 and not oldest.preferred_batch_size:
            oldest.preferred_batch_size.append(config.max_batch_size)
    if len(config.instance_group) == 0:
        config.instance_group.add(name=config.name)  # Triton names it after the model
    if config.backend == "python" and not config.default_model_filename:
        config.default_model_filename = "model.py"
    optimization = config.optimization
    if not optimization.HasField("input_pinned_memory"):
        optimization.input_pinned_memory.enable = True
    if not optimization.HasField("output_pinned_memory"):
        optimization.output_pinned_memory.enable = True
    if config.HasField("dynamic_batching") and config.max_batch_size > 0:
        preferred = config.dynamic_batching.preferred_batch_size
        if len(preferred) == 0:
            preferred.append(config.max_batch_size)
    for index, group in enumerate(config.instance_group):
        group.name = group.name or f"{config.name}_{index}"
        group.count = max(group.count, 1)
        if group.kind == mc.ModelInstanceGroup.KIND_AUTO:
            use_gpu = gpu_available and config.backend != "python"
            kind = mc.ModelInstanceGroup.KIND_GPU if use_gpu else mc.ModelInstanceGroup.KIND_CPU
            group.kind = kind
        if group.kind == mc.ModelInstanceGroup.KIND_GPU and len(group.gpus) == 0:
            group.gpus.extend(list(gpus) if gpu_available and gpus else [0])
