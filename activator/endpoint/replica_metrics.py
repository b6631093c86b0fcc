"""A model's replicas' Prometheus series (Triton's `nv_*`, models' own) as one, behind `thaw up`.

Each replica exposes its own counts on `/metrics`, from zero when it starts. Through the
activator a model's series are summed over its replicas per label set, and a replica that goes
away (scaled down, scaled to zero, died) leaves its last counts in a ledger, so counters never go
back, as they never do on one Triton server. Gauges (pending requests, a model's own gauges)
are the live replicas' only. Not aggregated: the replicas' host-wide gauges (`nv_cpu_*`,
`nv_gpu_*`, `nv_energy_*`: one host's, not a model's) and their `thaw_*` load metrics (the
activator has its own `thaw_*` series).

A model's requests held at the front door (at zero, during a wake, every replica busy) count
in its pending-request gauge (`with_held`), as they would wait in its queue on one server.

Every model of the repository has Triton's per-model families from `thaw up`'s start, as
from a Triton server's load (`with_zeros`): a model at zero, never woken, reads 0, so a client
that reads a counter before its first request finds it (L0_backend_python/lifecycle does).

Summaries (`--metrics-config summary_latencies=true`): their `_count` and `_sum` add up like
counters; a quantile is of one replica's recent requests and cannot be summed, so of several
replicas the largest is shown (an upper bound of the model's), and a replica gone leaves its
count and sum, not its quantiles. A model at zero has its summaries from the start too, its
quantiles NaN (no requests yet), as a Triton server's after a load.

`MetricsLedger` is the pure bookkeeping (the pattern of
activator.endpoint.replica_stats.StatsLedger); `ModelMetrics` adds the HTTP reads of replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import aiohttp

from activator.endpoint.replica import Replica
from activator.observe.metrics_text import Family, Labels, SampleKey, parse
from thawserver.metrics_config_flags import MetricsSettings
from thawwire import model_metrics

__all__ = [
    "MAX_PAGE_BYTES",
    "MetricsLedger",
    "ModelMetrics",
    "merge_families",
    "with_held",
    "with_zeros",
]

MAX_PAGE_BYTES = 8 * 1024 * 1024  # a replica's page larger than this is not read
_SKIPPED_PREFIXES = ("thaw_", "nv_cpu_", "nv_gpu_", "nv_energy_")
_CUMULATIVE = frozenset({"counter", "histogram", "summary"})  # never go back: kept when gone
_READ_TIMEOUT = aiohttp.ClientTimeout(total=5)
_FINAL_READ_TIMEOUT = aiohttp.ClientTimeout(total=2)  # holds up a retiring replica's stop

Families = dict[str, Family]


def kept(families: Families) -> Families:
    """The families the activator aggregates (module docstring)."""
    return {n: f for n, f in families.items() if not n.startswith(_SKIPPED_PREFIXES)}


def merge_families(pages: Iterable[Families]) -> Families:
    """Families by name, each sample summed over the pages (HELP and TYPE: the first page's)."""
    merged: Families = {}
    for page in pages:
        for name, family in page.items():
            into = merged.get(name)
            if into is None:
                merged[name] = Family(name, family.kind, family.help, dict(family.samples))
                continue
            for key, value in family.samples.items():
                held = into.samples.get(key)
                if held is None:
                    into.samples[key] = value
                elif _is_quantile(key):  # one replica's window each: not a sum
                    into.samples[key] = max(held, value, key=_nan_low)
                else:
                    into.samples[key] = held + value
    return merged


def _is_quantile(key: SampleKey) -> bool:
    return any(label == "quantile" for label, _ in key[1])


def _without_quantiles(family: Family) -> Family:
    """A gone replica's family: its quantiles were of its own recent requests, not kept."""
    samples = {k: v for k, v in family.samples.items() if not _is_quantile(k)}
    return Family(family.name, family.kind, family.help, samples)


def _nan_low(value: float) -> float:
    """A NaN quantile (a replica with no recent requests) never beats a number."""
    return -math.inf if math.isnan(value) else value


def with_zeros(
    families: Families,
    served: Mapping[str, Sequence[str]],
    settings: MetricsSettings | None = None,
) -> Families:
    """`families` with Triton's per-model families (thawwire.model_metrics) at 0 for every
    served (model, versions) none of whose replicas has reported them yet; samples already
    there are kept as they are. `settings` (`--metrics-config`): without latency counters
    those are not added, with summaries those are (NaN quantiles)."""
    settings = settings if settings is not None else MetricsSettings()
    wanted: list[tuple[str, str, str, list[Labels]]] = []
    for name, help_text in model_metrics.COUNTERS:
        if settings.counter_latencies or name not in model_metrics.LATENCY_COUNTERS:
            wanted.append((name, "counter", help_text, _model_labels(served)))
    failure, failure_help = model_metrics.FAILURE
    reasons: list[Labels] = [
        (("model", m), ("reason", r), ("version", v))
        for m, versions in served.items()
        for v in versions
        for r in model_metrics.FAILURE_REASONS
    ]
    wanted.append((failure, "counter", failure_help, reasons))
    pending, pending_help = model_metrics.PENDING
    wanted.append((pending, "gauge", pending_help, _model_labels(served)))
    for name, kind, help_text, label_sets in wanted:
        family = families.setdefault(name, Family(name, kind, help_text))
        for labels in label_sets:
            family.samples.setdefault((name, labels), 0.0)
    if settings.summary_latencies:
        _summary_zeros(families, served, settings.summary_quantiles)
    return families


def _summary_zeros(
    families: Families,
    served: Mapping[str, Sequence[str]],
    quantiles: tuple[tuple[float, float], ...],
) -> None:
    for name, help_text in model_metrics.SUMMARIES:
        family = families.setdefault(name, Family(name, "summary", help_text))
        reported = {dict(labels).get("model") for _, labels in family.samples}
        for labels in _model_labels(served):
            if dict(labels)["model"] in reported:
                continue
            for quantile, _ in quantiles:
                label = ("quantile", model_metrics.quantile_label(quantile))
                family.samples[(name, tuple(sorted((*labels, label))))] = math.nan
            family.samples[(f"{name}_sum", labels)] = 0.0
            family.samples[(f"{name}_count", labels)] = 0.0


def with_held(
    families: Families, held: Mapping[str, int], served: Mapping[str, Sequence[str]]
) -> Families:
    """`families` with each model's requests held at the front door (`held`: at zero during
    its wake, or every replica busy) added to its pending-request gauge, on its newest version
    (the one a request without a version gets): on one Triton server they would wait in the
    model's queue, and `nv_inference_pending_request_count` counts them there."""
    name, help_text = model_metrics.PENDING
    family = families.setdefault(name, Family(name, "gauge", help_text))
    for model, count in held.items():
        versions = served.get(model)
        if not versions:
            continue
        labels: Labels = (("model", model), ("version", max(versions, key=_version_order)))
        family.samples[(name, labels)] = family.samples.get((name, labels), 0.0) + count
    return families


def _version_order(version: str) -> tuple[int, str]:
    return (int(version), "") if version.isdigit() else (-1, version)


def _model_labels(served: Mapping[str, Sequence[str]]) -> list[Labels]:
    return [(("model", m), ("version", v)) for m, versions in served.items() for v in versions]


class MetricsLedger:
    """One model's series: each live replica's latest page, and the cumulative series of every
    replica gone, folded for good. Pure: the caller does the reading."""

    def __init__(self) -> None:
        self._gone: Families = {}
        self._latest: dict[str, tuple[int, Families]] = {}  # replica id -> (ticket, families)
        self._folded: set[str] = set()
        self._tickets = itertools.count(1)

    def ticket(self) -> int:
        """Taken before a read: an answer never replaces one from a read begun later."""
        return next(self._tickets)

    def record(self, replica: str, ticket: int, families: Families) -> None:
        if replica in self._folded:
            return
        held = self._latest.get(replica)
        if held is None or held[0] < ticket:
            self._latest[replica] = (ticket, kept(families))

    def fold(self, replica: str, final: Families | None = None) -> None:
        """The replica is gone: its cumulative series (`final`, else the last page seen) stay."""
        if replica in self._folded:
            return
        self._folded.add(replica)
        held = self._latest.pop(replica, None)
        page = kept(final) if final is not None else held[1] if held is not None else {}
        cumulative = {n: _without_quantiles(f) for n, f in page.items() if f.kind in _CUMULATIVE}
        if cumulative:
            self._gone = merge_families([self._gone, cumulative])

    def total(self, live: Iterable[str]) -> Families:
        """The model's series now: replicas not in `live` (died) are folded first."""
        still = set(live)
        for replica in [r for r in self._latest if r not in still]:
            self.fold(replica)
        return merge_families([*(page for _, page in self._latest.values()), self._gone])


class ModelMetrics:
    """One model's series for the life of `thaw up`: reads its replicas' `/metrics`."""

    def __init__(self, session: aiohttp.ClientSession | None) -> None:
        self.ledger = MetricsLedger()
        self._session = session  # None: nothing is read (tests of scaling alone)

    async def read(self, replicas: Callable[[], Sequence[Replica]]) -> Families:
        """Ask every live replica (none is woken), then total the ledger."""
        ticket = self.ledger.ticket()
        asked = [r for r in replicas() if not r.dead]
        pages = await asyncio.gather(*(self._fetch(r.url, _READ_TIMEOUT) for r in asked))
        for replica, page in zip(asked, pages, strict=True):
            if page is not None:
                self.ledger.record(replica.id, ticket, page)
        return self.ledger.total(r.id for r in replicas())

    async def retire(self, replica: Replica) -> None:
        """Before a replica stops: fold its final page (the last one seen if it has none)."""
        self.ledger.fold(replica.id, await self._fetch(replica.url, _FINAL_READ_TIMEOUT))

    async def _fetch(self, url: str, limit: aiohttp.ClientTimeout) -> Families | None:
        if self._session is None:
            return None
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
            async with self._session.get(url + "/metrics", timeout=limit) as resp:
                if resp.status != 200:
                    return None
                body = await resp.content.read(MAX_PAGE_BYTES + 1)
                if len(body) > MAX_PAGE_BYTES:
                    return None
                return parse(body.decode("utf-8"))
        return None
