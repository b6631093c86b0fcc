"""The words of a failed load, as tritonserver's: a load request's `load failed for model
'<name>': version N is at UNAVAILABLE state: <why>;` (qa/L0_lifecycle and
L0_trt_error_propagation read that far), `failed to load '<name>', failed to poll from model
repository: <why>` for refused overrides, the log's `failed to load '<name>' version N: <why>`
and the repository index's reason `<why>`.

Thaw's reasons name the version that failed as `model '<name>' version N: <why>`
(`version_reason` reads them back); a reason that does not is the model's, worded alone.
"""

from __future__ import annotations

from runtime.errors import ControlDisabled, InvalidInput, ModelNotFound, ServingError
from thawwire.load_overrides import refused
from thawwire.model_control import LOAD_FAILED_WORDS, load_failed

__all__ = [
    "failed_to_load",
    "index_reason",
    "name_load_failure",
    "refused_overrides",
    "version_reason",
]

# Refusals of the request itself, which Triton words on their own (no model was tried).
_REFUSALS = (ControlDisabled, InvalidInput, ModelNotFound)


def version_reason(name: str, reason: str) -> tuple[str, str] | None:
    """(N, why) of a reason `model '<name>' version N: <why>`; None for any other."""
    prefix = f"model '{name}' version "
    if reason.startswith(prefix):
        version, sep, why = reason[len(prefix) :].partition(": ")
        if sep and version.isdigit():
            return version, why
    return None


def failed_to_load(name: str, reason: str) -> str:
    """The log's record of a failed load: `failed to load 'm' version 1: <why>`, or `failed to
    load 'm': <reason>` for a reason that names no version of `name`."""
    parsed = version_reason(name, reason)
    if parsed is not None:
        return f"failed to load '{name}' version {parsed[0]}: {parsed[1]}"
    return f"failed to load '{name}': {reason}"


def index_reason(name: str, reason: str) -> str:
    """A repository-index row's reason: the why alone (the row names the model and version)."""
    parsed = version_reason(name, reason)
    return parsed[1] if parsed is not None else reason


def name_load_failure(name: str, exc: ServingError) -> None:
    """Word the reason a load of `name` failed as tritonserver's answer (qa/L0_lifecycle
    `test_config_override` and `test_load_wrong_optimization_profile` assert it): a version's
    failure as `version N is at UNAVAILABLE state: <why>;\n`, the error keeping its type, so
    its status holds."""
    if isinstance(exc, _REFUSALS) or exc.message.startswith(LOAD_FAILED_WORDS):
        return
    parsed = version_reason(name, exc.message)
    why = exc.message
    if parsed is not None:
        why = f"version {parsed[0]} is at UNAVAILABLE state: {parsed[1]};\n"
    exc.message = load_failed(name, why)
    exc.args = (exc.message,)


def refused_overrides(name: str, exc: InvalidInput) -> InvalidInput:
    """A load request's refused `config` or `file:` overrides, worded as Triton's
    `failed to load '<name>', failed to poll from model repository` (qa/L0_lifecycle
    test_file_override and _security), then why (thawwire.load_overrides.refused)."""
    return InvalidInput(refused(name, exc.message))
