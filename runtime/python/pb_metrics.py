"""`pb_utils.MetricFamily` and `pb_utils.Metric`: the custom-metrics API of Triton's python_backend.

Families and their series live in the server (`ModelHost.metric_*`); these classes check a
model's arguments in Triton's words and forward them to the process's host. pb_utils re-exports
both, so `triton_python_backend_utils.MetricFamily` reads as in Triton. Like pb_utils, it is
imported by stub processes, so it imports only the stdlib and what pb_utils may import.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable

from runtime.observe.custom_metrics import MetricKind
from runtime.python.host import ModelHost
from runtime.python.pb_tensors import TritonModelException

__all__ = ["Metric", "MetricFamily", "bind_host"]


def _no_host() -> ModelHost:
    raise TritonModelException("pb_metrics: no host is bound (import pb_utils first)")


# How MetricFamily and Metric reach the process's host: pb_utils' `current_host`, which pb_utils
# binds when it is imported (this module cannot import pb_utils, which re-exports it).
_current_host: Callable[[], ModelHost] = _no_host


def bind_host(current_host: Callable[[], ModelHost]) -> None:
    """Make MetricFamily and Metric talk to whatever host `current_host()` answers at each call."""
    global _current_host
    _current_host = current_host


class MetricFamily:
    """A custom metric family, exported on the server's `/metrics` with its `nv_*` series.

    Families are server-wide and named: every instance (every stub process) that creates
    `name` with the same kind shares it, and a `Metric` with the same labels is the same series.
    """

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name, description, kind):
        if kind not in (MetricKind.COUNTER, MetricKind.GAUGE, MetricKind.HISTOGRAM):
            raise TritonModelException("Unknown metric kind")
        try:
            _current_host().metric_family(str(name), str(description), int(kind))
        except ValueError as exc:
            raise TritonModelException(f"Error when creating MetricFamily: {exc}") from None
        self._name = str(name)
        self._kind = MetricKind(kind)

    def Metric(self, labels=None, buckets=None):
        if labels is None:
            labels = {}
        if not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if self._kind == MetricKind.HISTOGRAM:
            if buckets is None:
                raise TritonModelException("Failed to create metric. Missing required buckets.")
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if any(not low < high for low, high in itertools.pairwise(buckets)):  # as Triton
                raise TritonModelException(
                    "Failed to create metric. Buckets must be in strictly increasing order."
                )
        elif buckets is not None:
            raise TritonModelException("Failed to create metric. Unexpected buckets found.")
        text_labels = {str(k): str(v) for k, v in labels.items()}
        try:
            key = _current_host().metric_create(
                self._name, text_labels, [float(b) for b in buckets] if buckets else None
            )
        except ValueError as exc:
            raise TritonModelException(f"Error when creating Metric: {exc}") from None
        return Metric(key, self._kind, self)


# Triton's words for an operation on a Metric whose MetricFamily object is gone.
_FAMILY_DELETED = "Invalid metric operation as the corresponding 'MetricFamily' has been deleted."


class Metric:
    """One labelled series of a MetricFamily. As in Triton's stub, it does not keep its
    family alive: once the model drops its MetricFamily object, every operation on the
    Metric fails (TritonModelException) instead of writing to a family the model let go."""

    def __init__(self, key, kind, family=None):
        self._key = key
        self._kind = kind
        self._family = weakref.ref(family) if family is not None else None

    def _check_family(self):
        if self._family is not None and self._family() is None:
            raise TritonModelException(_FAMILY_DELETED)

    def increment(self, value):
        self._update("increment", value, "Failed to increment metric value")

    def set(self, value):
        self._update("set", value, "Failed to set metric value")

    def observe(self, value):
        self._update("observe", value, "Failed to observe metric value")

    def value(self):
        self._check_family()
        try:
            return _current_host().metric_value(self._key)
        except ValueError as exc:
            raise TritonModelException(f"Failed to get metric value: {exc}") from None

    def _update(self, op, value, what):
        self._check_family()
        try:
            _current_host().metric_update(self._key, op, float(value))
        except (ValueError, TypeError) as exc:
            raise TritonModelException(f"{what}: {exc}") from None
