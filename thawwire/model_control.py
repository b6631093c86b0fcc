"""Model control's modes and answers both servers agree on.

ModelControlMode: tritonserver's `--model-control-mode` values, which `thaw serve` and `thaw up`
both take (any case); POLL_SECS_RANGE: the range of `--repository-poll-secs`, in seconds.

CONTROL_DISABLED: the answer to a repository load or unload call when the model-control API is
off. Triton serves load/unload only in `--model-control-mode explicit` and answers every other
mode with this message (observed on 2.51, for `none` and `poll` alike); `thaw serve` and
`thaw up` both keep the API off unless started with `--model-control-mode explicit`, and say
so.

NOT_LOADED: the mark a replica (`thaw serve`) puts on its refusal of a model it does not have
loaded — never loaded there (503), unloaded (404: Triton's "Request for unknown model: 'm' has
no available versions"), or being unloaded — naming that model: an HTTP header,
and gRPC trailing metadata, of this name. The request never reached the model, so `thaw up`
may send it once more to another replica (activator.surfaces.proxy.to_replica): a model
evicted from a shared replica while a request to it was on its way loses no request.

load_failed(name, why) and not_in_repository(name): the answer to a load that failed — the model's
files were read and refused (Triton's `load failed for model '<name>': <why>`, which qa/
L0_lifecycle asserts), or there is no such model directory — on both servers.

not_unique(name, where): why a model name found in more than one model repository (several
`--model-repository`, no namespacing) is no model, on both servers: it is unavailable, with
this reason, and every other model is served.

not_ready(name) and no_available_versions(name): the refusal of a request for a model that is
not loaded — never loaded (503 / UNAVAILABLE), or unloaded on request (Triton's words and its
NOT_FOUND: 404) — on both servers (`thaw up` in explicit mode: activator.fleet.load_state).

ambiguous(name, count): Triton's answer to a name `count` namespaces hold (several
`--model-namespacing=true` repositories), its INVALID_ARG (400), on both servers.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

__all__ = [
    "CONTROL_DISABLED",
    "LOAD_FAILED_WORDS",
    "LOAD_MODEL_NOT_EXPLICIT",
    "NOT_LOADED",
    "POLL_SECS_RANGE",
    "ModelControlMode",
    "ambiguous",
    "load_failed",
    "no_available_versions",
    "not_in_repository",
    "not_ready",
    "not_unique",
    "unload_not_in_repository",
]


class ModelControlMode(StrEnum):
    """Triton's model control modes: what loads at start and whether load/unload is allowed."""

    NONE = "none"
    POLL = "poll"
    EXPLICIT = "explicit"


# `--repository-poll-secs`, seconds: at least a tenth of a second, at most a day.
POLL_SECS_RANGE = (0.1, 86_400.0)

# Word for word Triton's, so that clients matching on it keep working.
CONTROL_DISABLED = "explicit model load / unload is not allowed if polling is enabled"

# tritonserver's refusal to start with `--load-model` outside explicit mode, word for word (both
# servers refuse so).
LOAD_MODEL_NOT_EXPLICIT = (
    "Error: Use of '--load-model' requires setting '--model-control-mode=explicit' as well."
)

# Lower case: gRPC metadata keys must be.
NOT_LOADED = "thaw-model-not-loaded"


def not_unique(name: str, holders: Sequence[str], repositories: Sequence[str]) -> str:
    """The reason a model named in several repositories (`holders`, among the server's
    `repositories` in their order) is unavailable. Each is numbered as given on the command
    line: a client's copy of the reason has the paths cut (thawserver.redaction), the
    numbers stay."""
    where = "; ".join(f"#{repositories.index(h) + 1}: {h}" for h in holders)
    return (
        f"model '{name}' is in more than one model repository (--model-repository {where}): "
        "a model name must be unique across all model repositories"
    )


def ambiguous(name: str, count: int) -> str:
    """Triton's refusal of a request naming a model that `count` namespaces hold."""
    return (
        f"There are {count} identifiers of model '{name}' in global map, model namespace "
        "must be provided to resolve ambiguity."
    )


def not_ready(name: str) -> str:
    """The refusal of a request for model `name`, which is not loaded (never, or not yet)."""
    return f"model '{name}' is not ready"


def no_available_versions(name: str) -> str:
    """Triton's refusal of a request for model `name`, unloaded on request (its NOT_FOUND)."""
    return f"Request for unknown model: '{name}' has no available versions"


# How tritonserver's answer to a load that read the model and failed begins (`load_failed`;
# `failed to load '<name>', ...`: thawwire.load_overrides.refused and the log's record): an
# answer that already reads so is not worded again, and `thaw up` passes it on as it is.
LOAD_FAILED_WORDS = ("load failed for model", "failed to load")


def load_failed(name: str, why: str) -> str:
    """A load of model `name` that read its files and refused them, and why."""
    return f"load failed for model '{name}': {why}"


def unload_not_in_repository(name: str) -> str:
    """An unload of model `name`, which has no directory in the model repository (Triton
    answers OK; both Thaw servers refuse it, 404, in these words)."""
    return f"failed to unload '{name}', model is not in the repository"


def not_in_repository(name: str) -> str:
    """A load of model `name`, which has no directory in the model repository: Triton's
    words (its qa/L0_lifecycle asserts them, over REST and gRPC), then what they mean."""
    return (
        f"failed to load '{name}', failed to poll from model repository: no such model in the "
        "repository"
    )
