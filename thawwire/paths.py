"""The v2 paths about one model, and which of them a replica answers itself.

Both HTTP surfaces route `MODEL` and `MODEL_VERSION` (with the leaves below), and two places
decide from a bare path which model a request is about: the front door of `thaw up`, to hand
a new connection to a warm model's replica, and that replica, to answer a handed-off request
itself or send it back. Statistics (`/stats`, `/v2/models/stats`) are never a replica's: the
activator aggregates them over replicas. `changes_serving` names the model-control calls after
which a handed-off connection is routed afresh.
"""

from __future__ import annotations

import re

from thawwire.names import canonical_version, is_model_name

__all__ = [
    "MODEL", "MODEL_VERSION", "REPLICA_LEAVES", "SENT_BACK_QUERY", "changes_serving", "model_of",
    "sent_back",
]  # fmt: skip

MODEL = "/v2/models/{model}"
MODEL_VERSION = "/v2/models/{model}/versions/{version}"
REPLICA_LEAVES = frozenset({"", "ready", "config", "infer", "generate", "generate_stream"})
"""What follows a model (or model version) path in the requests a replica answers itself:
metadata (nothing), `/ready`, `/config`, `/infer`, and the generate extension's `/generate`
and `/generate_stream`."""

SENT_BACK_QUERY = "thaw-sent-back=1"
"""The query a replica adds to a request it sends back to the front door (runtime.direct.send_back):
the front door then serves it itself instead of handing its connection to a replica again."""

_PREFIX = "/v2/models/"
# The repository load and unload, and Thaw's scale-to-zero (activator.surfaces.app's routes).
_CHANGES_SERVING = re.compile(
    r"/v2/repository/models/[^/]+/(?:load|unload)|/thaw/models/[^/]+/scale-to-zero"
)


def changes_serving(path: str) -> bool:
    """Whether a path (without its query) is a call that changes what serves a model."""
    return _CHANGES_SERVING.fullmatch(path) is not None


def sent_back(target: str) -> bool:
    """Whether a request target (path and query) is one a replica sent back."""
    _, _, query = target.partition("?")
    return SENT_BACK_QUERY in query.split("&")


def model_of(path: str) -> str | None:
    """`m` of `/v2/models/{m}[/versions/{v}][/<leaf>]` (a path without its query, a leaf of
    REPLICA_LEAVES), when `m` is a model name and `v` a version; otherwise None."""
    if not path.startswith(_PREFIX):
        return None
    parts = path[len(_PREFIX) :].split("/")
    if len(parts) >= 3 and parts[1] == "versions":
        if len(parts) > 4 or canonical_version(parts[2]) is None:
            return None
        leaf = parts[3] if len(parts) == 4 else ""
    elif len(parts) > 2:
        return None
    else:
        leaf = parts[1] if len(parts) == 2 else ""
    if leaf not in REPLICA_LEAVES or parts[0] == "stats" or not is_model_name(parts[0]):
        return None
    return parts[0]
