"""A model's version directories and the ones its version policy serves."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from tritonconfig.errors import ModelConfigError
from tritonconfig.schema import mc

__all__ = ["available_versions", "select_versions"]

logger = logging.getLogger(__name__)


MAX_VERSION = (1 << 63) - 1
"""The largest version number: Triton's versions are int64 (and so are a request's)."""


def available_versions(model_dir: Path) -> list[int]:
    """Numeric version sub-directories of a model (`1`, `2`, not `01`), ascending.

    Only ASCII digits name a version (`str.isdigit` also takes `²`, which `int` refuses) and
    only up to `MAX_VERSION`: a larger one could never be asked for, so it is skipped (logged)
    instead of being loaded unreachable."""
    versions = []
    try:
        for entry in os.scandir(model_dir):
            name = entry.name
            if not (name.isascii() and name.isdigit() and name == str(int(name))):
                continue
            if int(name) > MAX_VERSION:
                logger.warning(
                    "model=%s version directory %s is over the largest version %d, skipped",
                    Path(model_dir).name, name[:32], MAX_VERSION,
                )  # fmt: skip
                continue
            if entry.is_dir():
                versions.append(int(name))
    except OSError as exc:
        raise ModelConfigError(f"cannot read model directory {model_dir}: {exc}") from exc
    return sorted(versions)


def select_versions(policy: mc.ModelVersionPolicy, available: list[int], source: str) -> list[int]:
    """Apply a version policy: latest N (default 1), all, or specific versions; ascending.

    A specific version with no directory is left out, logged as Triton logs it, and the others
    are served (as tritonserver does); ModelConfigError when none of them is there."""
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        chosen = list(available)
    elif choice == "specific":
        wanted = sorted(set(policy.specific.versions))
        missing = [v for v in wanted if v not in available]
        chosen = [v for v in wanted if v in available]
        if missing and not chosen:
            raise ModelConfigError(
                f"{source}: version_policy.specific names versions {missing} that do not exist"
            )
        for version in missing:
            logger.error(
                "model=%s version %d is specified for model '%s', but the version directory "
                "is not present", Path(source).name, version, Path(source).name,
            )  # fmt: skip
    else:
        count = policy.latest.num_versions if choice == "latest" else 1
        chosen = available[-count:] if count > 0 else []
    if not chosen:
        raise ModelConfigError(f"{source}: no version directory to serve (e.g. {source}/../1/)")
    return chosen
