"""tritonserver's refusals of `--load-model`, word for word: the start fails with its message.

    --load-model outside explicit mode   "Error: Use of '--load-model' requires setting ..."
    '*' beside other names               "Wildcard model name '*' must be the ONLY startup ..."
    ''                                   "Invalid model name"
    a name no repository has             "failed to poll model 'x': model not found in any ..."

Names are looked up as plain names only (thawwire.names): a path such as `..` or `/etc` is not
found, where tritonserver resolves it and reports on what it finds there.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from runtime.config import ModelControlMode
from thawwire.model_control import LOAD_MODEL_NOT_EXPLICIT
from thawwire.names import is_model_name

__all__ = ["startup_models_refusal"]

NOT_EXPLICIT = LOAD_MODEL_NOT_EXPLICIT
WILDCARD_NOT_ALONE = "Wildcard model name '*' must be the ONLY startup model if specified at all."
INVALID_NAME = "Invalid model name"


def startup_models_refusal(
    mode: ModelControlMode, names: Sequence[str], repositories: Sequence[Path]
) -> str | None:
    """Why the start must fail for these `--load-model` names, or None when it may go on."""
    if names and mode is not ModelControlMode.EXPLICIT:
        return NOT_EXPLICIT
    if "*" in names:
        return WILDCARD_NOT_ALONE if len(names) > 1 else None
    for name in names:
        if not name:
            return INVALID_NAME
        if not (is_model_name(name) and any((root / name).is_dir() for root in repositories)):
            return f"failed to poll model '{name}': model not found in any model repository"
    return None
