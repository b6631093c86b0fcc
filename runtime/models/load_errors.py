"""The words of a failed load request: Triton's `load failed for model '<name>': <why>`."""

from __future__ import annotations

from runtime.errors import ControlDisabled, InvalidInput, ModelNotFound, ServingError

__all__ = ["name_load_failure"]

# Refusals of the request itself, which Triton words on their own (no model was tried).
_REFUSALS = (ControlDisabled, InvalidInput, ModelNotFound)
_NAMED = ("load failed for model", "failed to load")


def name_load_failure(name: str, exc: ServingError) -> None:
    """Prefix the reason a load of `name` failed as tritonserver words it (qa/L0_lifecycle
    `test_config_override` asserts it); the error keeps its type, so its status holds."""
    if isinstance(exc, _REFUSALS) or exc.message.startswith(_NAMED):
        return
    exc.message = f"load failed for model '{name}': {exc.message}"
    exc.args = (exc.message,)
