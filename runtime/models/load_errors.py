"""The words of a failed load request: Triton's `load failed for model '<name>': <why>`, and
`failed to load '<name>', failed to poll from model repository: <why>` for refused overrides."""

from __future__ import annotations

from runtime.errors import ControlDisabled, InvalidInput, ModelNotFound, ServingError
from thawwire.load_overrides import refused
from thawwire.model_control import load_failed

__all__ = ["name_load_failure", "refused_overrides"]

# Refusals of the request itself, which Triton words on their own (no model was tried).
_REFUSALS = (ControlDisabled, InvalidInput, ModelNotFound)
_NAMED = ("load failed for model", "failed to load")


def name_load_failure(name: str, exc: ServingError) -> None:
    """Prefix the reason a load of `name` failed as tritonserver words it (qa/L0_lifecycle
    `test_config_override` asserts it); the error keeps its type, so its status holds."""
    if isinstance(exc, _REFUSALS) or exc.message.startswith(_NAMED):
        return
    exc.message = load_failed(name, exc.message)
    exc.args = (exc.message,)


def refused_overrides(name: str, exc: InvalidInput) -> InvalidInput:
    """A load request's refused `config` or `file:` overrides, worded as Triton's
    `failed to load '<name>', failed to poll from model repository` (qa/L0_lifecycle
    test_file_override and _security), then why (thawwire.load_overrides.refused)."""
    return InvalidInput(refused(name, exc.message))
