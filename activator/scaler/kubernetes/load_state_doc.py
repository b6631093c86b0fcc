"""Explicit mode's load state, shared by a fleet's activators: the document and its rules (pure).

The fleet's load state lives in the annotation `thaw.dev/load-state` of its own Lease,
`<lease name>-load-state` (not the scaling Lease, which its leader rewrites whole every retry
period; decision 0024, "Kubernetes, later"):

    {"generation": 7, "models": {"m": "named", "s": "loaded", "n": "unloaded", "e": "down"}}

("named": loaded by name, a load call named it, which `unload_dependents` never takes;
"loaded": loaded as an ensemble's step, or brought back with its steps; "down": an ensemble
unloaded with one of its steps, which comes back when that is loaded again:
activator.fleet.load_calls.)

Only load and unload calls write it; a model it does not name has the activator's start state
(`--load-model`, `--load-model-at-zero`). A write reads the Lease, applies its change to what it
read (`apply`: one more generation) and replaces it with the resourceVersion it read, so of two
writes at once one gets 409 Conflict and applies its change again to the winner's document:
no change is lost, the later write wins per model. A reader adopts a document only when its
generation is not older than the last one it adopted (`LoadStateView`): a re-read that started
before this activator's own write and ends after it does not undo that write. A Lease made
again (deleted by hand, a new `uid`) is adopted whatever its generation; a Lease found missing
keeps the last known document in force (the next write makes it again).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ANNOTATION_LOAD_STATE",
    "LOAD_STATES",
    "LoadStateDoc",
    "LoadStateView",
    "apply",
    "lease_name",
    "parse",
]

ANNOTATION_LOAD_STATE = "thaw.dev/load-state"
LOAD_STATES = frozenset({"loaded", "named", "unloaded", "down"})
_SUFFIX = "-load-state"
_MAX_MODELS = 10_000


def lease_name(scaling_lease: str) -> str:
    """The fleet's load-state Lease, named after its scaling Lease (kept a valid name)."""
    return scaling_lease[: 253 - len(_SUFFIX)] + _SUFFIX


@dataclass(frozen=True)
class LoadStateDoc:
    """What the annotation says: each model named and its state, at `generation`; `uid`
    is the Lease's (None: no Lease), which is not part of the annotation."""

    generation: int = 0
    models: Mapping[str, str] = field(default_factory=dict)
    uid: str | None = None

    def text(self) -> str:
        models = dict(sorted(self.models.items()))
        return json.dumps({"generation": self.generation, "models": models}, sort_keys=True)


def parse(lease: Mapping[str, Any] | None) -> LoadStateDoc:
    """The document a Lease object carries (none, or an empty Lease: generation 0, no model).
    ValueError when the annotation is there but not a document (written by hand, wrongly)."""
    meta = (lease or {}).get("metadata") or {}
    uid = meta.get("uid")
    uid = str(uid) if uid else None
    text = (meta.get("annotations") or {}).get(ANNOTATION_LOAD_STATE)
    if text is None:
        return LoadStateDoc(uid=uid)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{ANNOTATION_LOAD_STATE} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{ANNOTATION_LOAD_STATE} must be a JSON object")
    generation, models = data.get("generation"), data.get("models")
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        raise ValueError(f"{ANNOTATION_LOAD_STATE}: `generation` must be an integer >= 0")
    if not isinstance(models, dict) or len(models) > _MAX_MODELS:
        raise ValueError(f"{ANNOTATION_LOAD_STATE}: `models` must be an object of model -> state")
    for name, state in models.items():
        if state not in LOAD_STATES:
            raise ValueError(
                f"{ANNOTATION_LOAD_STATE}: model {name[:100]!r}: state must be "
                f"'loaded', 'named', 'unloaded' or 'down', not {str(state)[:40]!r}"
            )
    return LoadStateDoc(generation, dict(models), uid)


def apply(doc: LoadStateDoc, changes: Mapping[str, str]) -> LoadStateDoc:
    """`doc` with `changes` (model -> "loaded" | "named" | "unloaded" | "down") written over
    it, one generation on."""
    for name, state in changes.items():
        if state not in LOAD_STATES:
            raise ValueError(
                f"model {name!r}: state must be 'loaded', 'named', 'unloaded' or 'down'"
            )
    return LoadStateDoc(doc.generation + 1, {**doc.models, **changes}, doc.uid)


class LoadStateView:
    """This activator's last known document, and when it was last read (its own clock)."""

    def __init__(self) -> None:
        self.doc = LoadStateDoc()
        self.read_at: float | None = None  # the last successful read or write (None: never)
        self.failing_since: float | None = None  # the first failed read since the last success

    def offer(self, doc: LoadStateDoc, now: float) -> dict[str, str] | None:
        """A document read or written at `now`: adopted unless older than the one known (a
        re-read that raced this activator's own write). Returns the models whose state it
        changes (model -> new state), {} when adopted unchanged, None when not adopted."""
        known = self.doc
        if doc.uid is None and known.uid is not None:
            return None  # the Lease went missing: keep what is known
        if doc.uid == known.uid and doc.generation < known.generation:
            return None
        self.read_at, self.failing_since = now, None
        before = self.doc.models
        changed = {m: s for m, s in doc.models.items() if before.get(m) != s}
        self.doc = doc
        return changed

    def failed(self, now: float) -> None:
        """A read failed at `now`: the last known document stays in force."""
        if self.failing_since is None:
            self.failing_since = now

    def age_s(self, now: float) -> float | None:
        """How old the document in force is (None: never read)."""
        return None if self.read_at is None else now - self.read_at
