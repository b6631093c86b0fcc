"""How many stub processes a repository's Python models start in one replica: the count of
spare stubs that lets any one of them load without starting an interpreter (`thaw up`'s
default `--python-spare-stubs`, and `thaw serve --python-spare-stubs auto` on a warm pod).
"""

from __future__ import annotations

from collections.abc import Iterable

from thawwire.runtime_parameters import PYTHON_RUNTIME
from tritonconfig.schema import mc

__all__ = ["stub_instances"]


def stub_instances(configs: Iterable[mc.ModelConfig]) -> int:
    """The most stub processes one replica of these models starts: a Python model's instances
    (Python-based backends read as "python"), each group's count (1 unset, as a config as stored
    completes it), a KIND_GPU group's on each of its GPUs;
    0 for a model whose instances run in the replica (`thaw.python_runtime: in_process`) or
    under their own interpreter (`EXECUTION_ENV_PATH`: a spare is never theirs)."""
    most = 0
    for config in configs:
        params = config.parameters
        if config.backend != "python" or "EXECUTION_ENV_PATH" in params:
            continue
        runtime = params.get(PYTHON_RUNTIME)
        if runtime is not None and runtime.string_value.strip() == "in_process":
            continue
        gpu = mc.ModelInstanceGroup.KIND_GPU
        count = sum(max(1, g.count) * (max(1, len(g.gpus)) if g.kind == gpu else 1)
                    for g in config.instance_group)  # fmt: skip
        most = max(most, count or 1)
    return most
