"""tritonserver's model-repository flags as `thaw serve` and `thaw up` both read them: the
repositories (REPO and `--model-repository`, repeatable), `--load-model`'s refusals and
`--strict-model-config`'s deprecation warnings, in tritonserver's words.

    model_repositories(REPO, [DIR, ...])  -> the repositories, each once (ValueError: none)
    names_s3(args)                        -> whether REPO or a --model-repository is s3://
    localized(args, environ)              -> the flags' S3 repositories copied locally
                                             (thawserver.s3_repository), args on the copies
    startup_models_refusal(...)           -> why `--load-model` refuses the start, or None
    strict_model_config_warnings(...)     -> the lines tritonserver prints on stderr

`--load-model`'s refusals, word for word tritonserver's:

    --load-model outside explicit mode   "Error: Use of '--load-model' requires setting ..."
    '*' beside other names               "Wildcard model name '*' must be the ONLY startup ..."
    ''                                   "Invalid model name"
    a name no repository has             "failed to poll model 'x': model not found in any ..."
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from thawserver.s3_repository.localize import LocalizedRepositories, localize, mount_directory
from thawserver.s3_repository.url import is_s3_url
from thawwire.model_control import LOAD_MODEL_NOT_EXPLICIT
from thawwire.names import is_model_name

__all__ = [
    "ALL_MODELS",
    "INVALID_NAME",
    "WILDCARD_NOT_ALONE",
    "localized",
    "model_repositories",
    "names_s3",
    "startup_models_refusal",
    "strict_model_config_warnings",
]

ALL_MODELS = "*"  # `--load-model=*`: every model of the repositories
WILDCARD_NOT_ALONE = "Wildcard model name '*' must be the ONLY startup model if specified at all."
INVALID_NAME = "Invalid model name"


# The cloud stores tritonserver reads that thaw does not, by URL scheme.
_CLOUD_STORES = {"gs": "Google Cloud Storage", "as": "Azure Storage"}


def model_repositories(
    positional: str | Path | None, given: Sequence[str | Path]
) -> tuple[Path, ...]:
    """REPO then each `--model-repository`, in order; ValueError when there is none, or when
    two name one directory through a link.

    One directory named twice is one repository (tritonserver keeps a set of them), not a
    second that makes each of its models a duplicate: the first naming is kept. A cloud
    store thaw cannot read (`gs://`, `as://`: tritonserver's Google Cloud and Azure
    repositories) is refused by name, not read as a local path."""
    for text in ([positional] if positional is not None else []) + list(given):
        scheme = str(text).split("://", 1)[0] if "://" in str(text) else ""
        if scheme in _CLOUD_STORES:
            raise ValueError(
                f"model repository {text}: {_CLOUD_STORES[scheme]} repositories are not "
                "supported (thaw reads local directories and s3://); copy it into a local "
                "directory or an S3-compatible store"
            )
    named = ([Path(positional)] if positional is not None else []) + [Path(r) for r in given]
    by_path = {os.path.abspath(r): r for r in reversed(named)}
    repositories = tuple(by_path[key] for key in dict.fromkeys(os.path.abspath(r) for r in named))
    if not repositories:
        raise ValueError("no model repository: give REPO or --model-repository=DIR")
    seen: set[Path] = set()
    for repository in repositories:
        if repository.resolve() in seen:
            raise ValueError(f"model repository {repository} is given twice")
        seen.add(repository.resolve())
    return repositories


def names_s3(args: argparse.Namespace) -> bool:
    """Whether REPO or a `--model-repository` is an S3 repository (`s3://...`): its copy is
    made only once every other flag was accepted (a refused flag costs no download)."""
    given = [args.repository, *args.model_repositories]
    return any(is_s3_url(str(r)) for r in given if r is not None)


def localized(
    args: argparse.Namespace, environ: Mapping[str, str]
) -> tuple[argparse.Namespace, LocalizedRepositories]:
    """REPO and `--model-repository` with each `s3://...` one copied into a local mirror under
    `TRITON_AWS_MOUNT_DIRECTORY` (or the temp directory), and `args` naming the copies in its
    place, in order; the mirrors (their owner syncs and closes them). RepositorySourceError
    (an OSError) when an S3 repository cannot be read."""
    given = ([args.repository] if args.repository is not None else []) + list(
        args.model_repositories
    )
    local = localize([str(r) for r in given], parent=mount_directory(environ), environ=environ)
    if not local.any_remote:
        return args, local
    replaced = argparse.Namespace(**vars(args))
    replaced.repository = None
    replaced.model_repositories = list(local.paths)
    return replaced, local


def startup_models_refusal(
    names: Sequence[str], *, explicit: bool, has_model: Callable[[str], bool]
) -> str | None:
    """Why the start must fail for these `--load-model` names, or None when it may go on.
    `explicit`: `--model-control-mode explicit`; `has_model(name)`: whether a repository has
    a model directory of that (valid) name."""
    if names and not explicit:
        return LOAD_MODEL_NOT_EXPLICIT
    if ALL_MODELS in names:
        return WILDCARD_NOT_ALONE if len(names) > 1 else None
    for name in names:
        if not name:
            return INVALID_NAME
        if not (is_model_name(name) and has_model(name)):
            return f"failed to poll model '{name}': model not found in any model repository"
    return None


def strict_model_config_warnings(
    strict_model_config: bool | None, *, disable_auto_complete: bool
) -> list[str]:
    """tritonserver's warnings (on stderr, before its log starts) for `--strict-model-config`:
    deprecated whenever given, and overridden when false beside
    `--disable-auto-complete-config`."""
    if strict_model_config is None:
        return []
    warnings = [
        "Warning: '--strict-model-config' has been deprecated! Please use "
        "'--disable-auto-complete-config' instead."
    ]
    if disable_auto_complete and not strict_model_config:
        warnings.append(
            "Warning: Overriding deprecated '--strict-model-config' from False to True in favor "
            "of '--disable-auto-complete-config'!"
        )
    return warnings
