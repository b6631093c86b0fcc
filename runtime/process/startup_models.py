"""tritonserver's refusals of `--load-model` on `thaw serve`, over its repositories: the words
and the rule are `thaw up`'s too (thawserver.repository_flags).

Names are looked up as plain names only (thawwire.names): a path such as `..` or `/etc` is not
found, where tritonserver resolves it and reports on what it finds there.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from runtime.config import ModelControlMode
from thawserver import repository_flags
from thawwire.model_control import LOAD_MODEL_NOT_EXPLICIT

__all__ = ["startup_models_refusal"]

NOT_EXPLICIT = LOAD_MODEL_NOT_EXPLICIT
WILDCARD_NOT_ALONE = repository_flags.WILDCARD_NOT_ALONE
INVALID_NAME = repository_flags.INVALID_NAME


def startup_models_refusal(
    mode: ModelControlMode, names: Sequence[str], repositories: Sequence[Path]
) -> str | None:
    """Why the start must fail for these `--load-model` names, or None when it may go on."""
    return repository_flags.startup_models_refusal(
        names,
        explicit=mode is ModelControlMode.EXPLICIT,
        has_model=lambda name: any((root / name).is_dir() for root in repositories),
    )
