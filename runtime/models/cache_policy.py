"""Which models may use the response cache: Triton refuses one that is decoupled.

    decoupled_cache_error(config, steps) -> the refusal's text, or None

A decoupled model's answer is a stream of responses, which the cache (one answer per request)
cannot hold; Triton refuses to load such a model with `response_cache { enable: true }` while
the server has a cache, and so an ensemble with the cache on that is decoupled or has a
decoupled step. `steps` are the configs of an ensemble's step models (empty for any other).
"""

from __future__ import annotations

from collections.abc import Iterable

from tritonconfig.schema import mc

__all__ = ["decoupled_cache_error"]


def decoupled_cache_error(config: mc.ModelConfig, steps: Iterable[mc.ModelConfig]) -> str | None:
    if not config.response_cache.enable:
        return None
    if config.model_transaction_policy.decoupled:
        return (
            f"Response cache does not currently support decoupled model '{config.name}': "
            "disable its response_cache or its decoupled transaction policy"
        )
    for step in steps:
        if step.model_transaction_policy.decoupled:
            return (
                f"Response cache does not currently support decoupled step '{step.name}' of "
                f"ensemble '{config.name}': disable the ensemble's response_cache"
            )
    return None
