"""Whether a model's answers on a gRPC stream may leave out of request order: a decoupled
model's, and an ensemble's with a decoupled step anywhere below it (its many responses,
runtime.scheduling.ensemble_flows), as Triton streams them. Such an ensemble is decoupled
itself, as Triton's core makes it whatever its config says (`has_decoupled_step`): its config
reads `decoupled: true`, and a plain HTTP or gRPC infer is refused.

A step model's config is the one this server loaded, else the one in the model repository:
under `thaw up` an ensemble's replica serves only the ensemble, its steps run in other
replicas, and the repository it was started from says what they are.
"""

from __future__ import annotations

from collections.abc import Callable

from tritonconfig import composing_models
from tritonconfig.schema import mc

__all__ = ["answers_as_they_come", "has_decoupled_step"]


def answers_as_they_come(name: str, config_of: Callable[[str], mc.ModelConfig | None]) -> bool:
    """Whether `name` is decoupled or an ensemble with a decoupled step (`config_of(model)`:
    its config, None when unknown: an unknown step keeps request order)."""
    config = config_of(name)
    if config is None:
        return False
    return config.model_transaction_policy.decoupled or has_decoupled_step(config, config_of)


def has_decoupled_step(
    config: mc.ModelConfig, config_of: Callable[[str], mc.ModelConfig | None]
) -> bool:
    """Whether an ensemble has a decoupled model among its steps, or below a step that is an
    ensemble (False for any other model)."""
    seen: set[str] = set()
    todo = composing_models(config)
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        step = config_of(model)
        if step is None:
            continue
        if step.model_transaction_policy.decoupled:
            return True
        todo.extend(composing_models(step))
    return False
