"""The runtime's face of `tritonconfig`: the same functions, raising `RepositoryError`.

Parsing, completion, validation and rendering live in `tritonconfig`, shared with the activator
(whose answers at zero replicas must equal a replica's). Here are the parts the runtime uses,
with tritonconfig's `ModelConfigError` turned into the runtime's `RepositoryError` (400),
message kept; functions that cannot fail are tritonconfig's own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import tritonconfig
from runtime.errors import RepositoryError
from tritonconfig import (
    ModelConfigError,
    config_to_json,
    default_model_filename,
    fill_defaults,
    ort_session_options,
    torch_parameters,
)

__all__ = [
    "complete_config",
    "config_from_json",
    "config_to_json",
    "default_model_filename",
    "fill_defaults",
    "inference_mode",
    "ort_settings",
    "parse_config",
    "run_repository_agents",
    "select_versions",
    "torch_settings",
    "validate_config",
    "weight_sharing",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _raising_repository_error(func: Callable[_P, _R]) -> Callable[_P, _R]:
    """`func`, with a `ModelConfigError` leaving it as a `RepositoryError`, message kept."""

    @functools.wraps(func)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return func(*args, **kwargs)
        except ModelConfigError as exc:
            raise RepositoryError(exc.message) from exc

    return wrapper


parse_config = _raising_repository_error(tritonconfig.parse_config)
config_from_json = _raising_repository_error(tritonconfig.config_from_json)
select_versions = _raising_repository_error(tritonconfig.select_versions)
complete_config = _raising_repository_error(tritonconfig.complete_config)
validate_config = _raising_repository_error(tritonconfig.validate_config)
run_repository_agents = _raising_repository_error(tritonconfig.run_repository_agents)
# The backends' config parameters (their refusals judged by `thaw up` too, at its read).
ort_settings = _raising_repository_error(ort_session_options.ort_settings)
torch_settings = _raising_repository_error(torch_parameters.torch_settings)
inference_mode = _raising_repository_error(torch_parameters.inference_mode)
weight_sharing = _raising_repository_error(torch_parameters.weight_sharing)
