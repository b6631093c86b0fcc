"""KServe v2 model metadata (`GET /v2/models/{m}[/versions/{v}]`) from a completed ModelConfig."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from thawwire.datatype_names import config_to_v2
from tritonconfig.schema import mc

__all__ = ["model_metadata", "platform"]


def platform(config: mc.ModelConfig) -> str:
    """The `platform` metadata reports: the config's platform, else its backend."""
    return config.platform or config.backend


def model_metadata(
    config: mc.ModelConfig, served: Sequence[str], asked: str | None = None
) -> dict[str, Any]:
    """The metadata JSON of a model serving versions `served`; asked for one version (`asked`,
    one of them), it lists only that one, as Triton does. A batching model shows -1 as each
    tensor's first dim."""
    batch = [-1] if config.max_batch_size > 0 else []

    def tensors(ios: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": io.name,
                "datatype": config_to_v2(mc.DataType.Name(io.data_type)),
                "shape": batch + [int(d) for d in io.dims],
            }
            for io in ios
        ]

    return {
        "name": config.name,
        "versions": [asked] if asked else list(served),
        "platform": platform(config),
        "inputs": tensors(config.input),
        "outputs": tensors(config.output),
    }
