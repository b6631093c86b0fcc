"""What a `thaw up` reports: its metrics, status document, history and cost.

    metrics          the activator's Prometheus metrics, declared once
    metrics_text     Prometheus text exposition, parsed and rendered
    status_document  the status document (`GET /thaw/status`, `thaw status`)
    shared_report    its shared replicas section: models per replica, budgets, evictions
    history          a bounded ring of per-model samples (the status page's plots)
    cost             what a model's replicas cost, and what always-on would have

Exports `Metrics`, `StatusDocument` and `History`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from activator.observe.history import History
    from activator.observe.metrics import Metrics
    from activator.observe.status_document import StatusDocument

__all__ = ["History", "Metrics", "StatusDocument"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "History": "activator.observe.history",
    "Metrics": "activator.observe.metrics",
    "StatusDocument": "activator.observe.status_document",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
