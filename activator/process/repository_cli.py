"""`thaw up`'s model-repository flags, tritonserver's spellings as `thaw serve` takes them:
the repositories (REPO, `--model-repository`), `--model-control-mode`,
`--repository-poll-secs`, `--load-model` (`*`: every model),
`--load-model-at-zero` (explicit mode: loaded, not woken; activator.fleet.load_state),
`--strict-readiness`, `--exit-on-error`, `--disable-auto-complete-config` /
`--strict-model-config`, and `--model-namespacing` (true: each repository a namespace,
activator.fleet.repository; `--scaler local` only). Parsed by
thawserver.repository_flags, `thaw serve`'s code. What tritonserver's start, which loads its
models, would refuse, though `thaw up` loads none at start: `load_refusals` (the files, given
`--exit-on-error=true`) and `rate_limit_refusals` (rate-limiter resources, from the configs).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence, Set
from typing import Any

from activator.errors import ConfigError
from thawserver.backend_config_flags import backend_settings, default_max_batch_size
from thawserver.bool_flag import triton_bool
from thawserver.rate_limit_flags import parse_mode, parse_resource
from thawserver.rate_limit_resources import start_refusals
from thawserver.repository_flags import (
    ALL_MODELS,
    model_repositories,
    names_s3,
    startup_models_refusal,
    strict_model_config_warnings,
)
from thawwire.model_control import ModelControlMode
from tritonconfig import ModelConfigError, graph_mismatch, run_repository_agents

__all__ = [
    "add_repository_arguments",
    "check_startup_models",
    "load_refusals",
    "models_loaded_at_start",
    "models_to_wake",
    "rate_limit_refusals",
    "refusal_text",
    "refuse_remote_on_kubernetes",
    "refused_at_start",
    "repository_settings",
    "start_warnings",
    "triton_bool",
]


def add_repository_arguments(p: argparse.ArgumentParser) -> None:
    """REPO (optional beside `--model-repository`) and the flags of the group below."""
    p.add_argument(
        "repository", metavar="REPO", nargs="?", default=None,
        help="Triton model repository: a directory or s3://[host:port/]bucket/path (or "
        "--model-repository=DIR, repeatable)",
    )  # fmt: skip
    g = p.add_argument_group("model repositories and readiness (tritonserver's flags)")
    g.add_argument(
        "--model-repository", "--model-store", dest="model_repositories", action="append",
        default=[], metavar="DIR",
        help="a model repository (repeatable, as tritonserver's; with REPO, the models of all "
        "of them are served as one index; a model name in two repositories is unavailable, "
        "as on thaw serve). --scaler local only",
    )  # fmt: skip
    g.add_argument(
        "--strict-readiness", type=triton_bool, default=True, metavar="BOOL",
        help="/v2/health/ready (and gRPC ServerReady) answer ready only once the start is "
        "done: the warm pool primed and every --load-model woken (default true); false: "
        "ready as soon as the server answers. A model at zero counts as ready",
    )  # fmt: skip
    g.add_argument(
        "--exit-on-error", type=triton_bool, default=None, metavar="BOOL",
        help="false, given: a model repository that is not a directory leaves thaw up "
        "answering (metadata, index) but neither live nor ready, as tritonserver that failed "
        "to initialize; otherwise (default, or true) it refuses the start. true, given "
        "(tritonserver's default): a model whose config the repository's read refuses "
        "refuses the start too, as thaw serve --exit-on-error=true, and a python model's own "
        "auto_complete_config is run at start (the model woken once); by default such a model "
        "is unavailable and the others are served",
    )  # fmt: skip
    g.add_argument(
        "--disable-auto-complete-config", action="store_true",
        help="do not complete configs from model files (ONNX inputs and outputs) in the "
        "activator or in any replica: each config.pbtxt must declare them",
    )  # fmt: skip
    g.add_argument(
        "--strict-model-config", type=triton_bool, default=None, metavar="BOOL",
        help="true = --disable-auto-complete-config (tritonserver's deprecated name; warns as "
        "tritonserver does)",
    )  # fmt: skip
    g.add_argument(
        "--model-control-mode", choices=[m.value for m in ModelControlMode], default="none",
        type=str.lower,  # tritonserver (and thaw serve) take any case: `=EXPLICIT`
        help="explicit: only loaded models are served (--load-model, --load-model-at-zero, "
        "the load API: it re-reads the model's directory and warms it; unload refuses the "
        "model again, drained to zero; a loaded one still scales to zero); poll: re-read the "
        "repository every --repository-poll-secs (added models appear at zero, changed ones "
        "are replaced, removed ones drained), load/unload refused as Triton does; none: the "
        "repository is read at start, load/unload refused (default none)",
    )  # fmt: skip
    g.add_argument(
        "--repository-poll-secs", type=float, default=15.0, metavar="SECONDS",
        help="with --model-control-mode poll: seconds between reads of the repository "
        "(default 15; local scaler only)",
    )  # fmt: skip
    g.add_argument(
        "--load-model", action="append", default=[], metavar="NAME",
        help="with --model-control-mode explicit: wake this model at start, as the load call "
        "does (repeatable; '*' wakes every model, as tritonserver's); one that cannot be woken "
        "refuses the start, as in tritonserver",
    )  # fmt: skip
    g.add_argument(
        "--load-model-at-zero", dest="loaded_at_zero", action="append", default=[],
        metavar="NAME",
        help="with --model-control-mode explicit: this model is loaded at start but not "
        "woken (repeatable; '*': every model): ready at zero, its first request wakes it, as "
        "in the other modes. A model neither this nor --load-model names is not loaded until "
        "a load call (Triton's explicit mode: not ready, its requests refused)",
    )  # fmt: skip
    g.add_argument(
        "--model-namespacing", type=triton_bool, default=False, metavar="BOOL",
        help="each model repository is a namespace (default false): a name may be in several, "
        "is refused by name (Triton's ambiguity, 400) and runs as its own namespace's ensemble "
        "step; without it a name in two repositories is unavailable. --scaler local only",
    )  # fmt: skip


def refuse_remote_on_kubernetes(args: argparse.Namespace) -> None:
    """ConfigError for an `s3://` repository with `--scaler kubernetes`: `thaw up` copies it
    to its own disk, which pods do not see (they serve the repository of their image or
    volume)."""
    if args.scaler == "kubernetes" and names_s3(args):
        raise ConfigError(
            "an s3:// model repository needs --scaler local: thaw up copies it to this "
            "machine, and pods serve the repository of their image or volume"
        )


def repository_settings(args: argparse.Namespace, *, kubernetes: bool) -> dict[str, Any]:
    """The ActivatorConfig fields of these flags; ConfigError names a refused one."""
    if args.loaded_at_zero and args.model_control_mode != "explicit":
        raise ConfigError("--load-model-at-zero needs --model-control-mode=explicit")
    if args.model_namespacing and kubernetes:
        raise ConfigError(
            "--model-namespacing=true needs --scaler local: pods serve the one repository of "
            "their image or volume, so there is no second namespace"
        )
    try:
        repositories = model_repositories(args.repository, args.model_repositories)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if kubernetes and len(repositories) > 1:
        raise ConfigError(
            "several model repositories need --scaler local: pods serve the one repository "
            "of their image or volume (give one REPO with --scaler kubernetes)"
        )
    return {
        "repository": repositories[0],
        "more_repositories": repositories[1:],
        "model_namespacing": args.model_namespacing,
        "loaded_at_zero": tuple(dict.fromkeys(args.loaded_at_zero)),
        "strict_readiness": args.strict_readiness,
        "exit_on_error": args.exit_on_error,
        "auto_complete_config": not (args.disable_auto_complete_config or args.strict_model_config),
        "default_max_batch_size": _default_max_batch_size(args),
    }


def _default_max_batch_size(args: argparse.Namespace) -> int:
    """`--backend-config=[onnxruntime,]default-max-batch-size` (else 4), for the activator's
    own auto-complete of ONNX configs, as its replicas (given the same flags) complete them."""
    try:
        return default_max_batch_size(backend_settings(args.backend_config), "onnxruntime")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def start_warnings(args: argparse.Namespace) -> list[str]:
    """What tritonserver prints on stderr for these flags before its log starts."""
    return strict_model_config_warnings(
        args.strict_model_config, disable_auto_complete=args.disable_auto_complete_config
    )


def check_startup_models(
    names: Sequence[str], *, explicit: bool, servable: Sequence[str], unavailable: Set[str]
) -> None:
    """ConfigError, in tritonserver's words, when `--load-model` must refuse the start, once
    the repositories are read (`servable` and `unavailable` model names)."""
    refusal = startup_models_refusal(
        names, explicit=explicit, has_model=lambda n: n in servable or n in unavailable
    )
    if refusal is not None:
        raise ConfigError(refusal)


def refused_at_start(
    unavailable: Mapping[str, str],
    *,
    exit_on_error: bool | None,
    explicit: bool,
    load_models: Sequence[str],
) -> dict[str, str]:
    """The models whose refusal refuses the start under `--exit-on-error=true` (tritonserver's
    default, given), with their reasons, by name; empty otherwise. A model counts when the
    start would load it: every model, or in explicit mode those `--load-model` names (`*`:
    all). `unavailable` is what the repository's read judged, with its repository agents and
    an ONNX model's config against its graph (`load_refusals`) and its rate-limiter resources
    (`rate_limit_refusals`); a python model's own `auto_complete_config` is run at start by a
    replica (activator.process.serving); what else only a replica's load checks is refused at
    the model's first wake: a model at zero is not loaded at start."""
    if exit_on_error is not True:
        return {}
    if explicit and ALL_MODELS not in load_models:
        unavailable = {n: r for n, r in unavailable.items() if n in load_models}
    return dict(sorted(unavailable.items()))


def refusal_text(refused: Mapping[str, str]) -> str:
    """`thaw serve --exit-on-error=true`'s words for a refused start: each model and why."""
    reasons = "; ".join(f"{name}: {reason}" for name, reason in refused.items())
    return f"failed to load all models: {reasons}"


def load_refusals(repository: Any, names: Sequence[str]) -> dict[str, str]:
    """With `--exit-on-error=true`: each model of `names` whose replica's load would refuse
    what its files hold, by name, in Triton's words: a repository agent of its config failing
    (the checksum agent: a file's MD5, tritonconfig.repository_agents), or an ONNX model whose
    config its graph refutes (input count and names, shapes). Reads those files whole: only
    for a start that asked to be refused on any error, as tritonserver loads (and so checks)
    every model at its start."""
    refused = {}
    for name in names:
        entry = repository.get(name)
        try:
            run_repository_agents(entry.config, entry.directory)
        except ModelConfigError as exc:
            refused[name] = exc.message
            continue
        if entry.config.backend != "onnxruntime":
            continue
        problem = graph_mismatch(
            entry.config, entry.directory, entry.versions, str(entry.directory)
        )
        if problem:
            refused[name] = problem
    return refused


def rate_limit_refusals(
    repository: Any, names: Sequence[str], args: argparse.Namespace
) -> dict[str, str]:
    """With `--rate-limit=execution_count`: each model of `names` (those the start loads) that
    tritonserver's start would refuse for its rate-limiter resources, in Triton's words: a
    `--rate-limit-resource` count below what one of its instances needs, or a resource global
    in one model's instance group and per device in another's. Each replica checks the first
    at its own load, but holds only its own models, so the second is seen only here. The
    flags were checked by `rate_limit_args` already."""
    mode = parse_mode(args.rate_limit)
    explicit = [parse_resource(text) for text in args.rate_limit_resource]
    configs = {name: repository.get(name).config for name in names}
    return start_refusals(configs, mode, explicit)


def models_loaded_at_start(
    load_models: Sequence[str], *, explicit: bool, servable: Sequence[str]
) -> tuple[str, ...]:
    """The servable models tritonserver loads at its start: every one, or in explicit mode
    those `--load-model` names (`*`: all)."""
    if not explicit or ALL_MODELS in load_models:
        return tuple(servable)
    return tuple(n for n in servable if n in load_models)


def models_to_wake(names: Sequence[str], servable: Sequence[str]) -> tuple[str, ...]:
    """The models `--load-model` wakes at start, each once: `*` is every servable one."""
    if ALL_MODELS in names:
        return tuple(servable)
    return tuple(dict.fromkeys(names))
