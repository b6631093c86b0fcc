"""The replicas' Prometheus series behind `thaw up`: Triton's names kept as written, counters
summed and monotonic as replicas come and go, gauges from live replicas only."""

from __future__ import annotations

from activator.endpoint.replica_metrics import (
    MetricsLedger,
    merge_families,
    with_held,
    with_zeros,
)
from activator.observe.metrics_text import Family, parse, render
from thawserver.metrics_config_flags import MetricsSettings

_PAGE = """\
# HELP nv_inference_count Number of inferences performed
# TYPE nv_inference_count counter
nv_inference_count{{model="m",version="1"}} {count}
# HELP nv_inference_pending_request_count Instantaneous number of pending requests
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{{model="m",version="1"}} {pending}
# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]
# TYPE nv_cpu_utilization gauge
nv_cpu_utilization 0.5
# HELP thaw_model_load_duration_seconds Seconds the last load took
# TYPE thaw_model_load_duration_seconds gauge
thaw_model_load_duration_seconds{{model="m",version="1"}} 0.2
# HELP latency_us A model's own histogram
# TYPE latency_us histogram
latency_us_bucket{{le="10.0",model="m"}} {count}
latency_us_bucket{{le="+Inf",model="m"}} {count}
latency_us_count{{model="m"}} {count}
latency_us_sum{{model="m"}} 12.5
"""


def _page(count: float, pending: float = 0.0) -> dict[str, Family]:
    return parse(_PAGE.format(count=count, pending=pending))


def _value(families: dict[str, Family], name: str, sample: str | None = None) -> float | None:
    family = families.get(name)
    if family is None:
        return None
    values = [v for (s, _), v in family.samples.items() if s == (sample or name)]
    return sum(values) if values else None


def test_triton_counter_names_are_kept_as_written() -> None:
    families = _page(5)
    assert _value(families, "nv_inference_count") == 5.0
    text = render(families.values())
    assert 'nv_inference_count{model="m",version="1"} 5\n' in text
    assert "_total" not in text
    assert parse(text).keys() == families.keys()  # what we render reads back the same


def test_labels_with_quotes_and_hostile_lines_are_safe() -> None:
    text = '# TYPE g gauge\ng{a="x\\"}y",b="\\\\"} 2\nnot a sample\ng{bad=1} 3\n{} 4\n'
    families = parse(text)
    assert families["g"].samples == {("g", (("a", 'x"}y'), ("b", "\\"))): 2.0}
    assert parse(render(families.values()))["g"].samples == families["g"].samples


def test_counters_sum_over_replicas_and_survive_a_scale_to_zero() -> None:
    ledger = MetricsLedger()
    ledger.record("r1", ledger.ticket(), _page(5, pending=2))
    ledger.record("r2", ledger.ticket(), _page(7, pending=1))
    both = ledger.total(["r1", "r2"])
    assert _value(both, "nv_inference_count") == 12.0
    assert _value(both, "nv_inference_pending_request_count") == 3.0
    assert _value(both, "latency_us", "latency_us_count") == 12.0
    # Host-wide gauges and the replicas' own thaw_* series are not a model's.
    assert "nv_cpu_utilization" not in both and "thaw_model_load_duration_seconds" not in both

    ledger.fold("r1", _page(6))  # retired: its final page counts for good
    ledger.fold("r2")  # died: its last page seen counts
    gone = ledger.total([])
    assert _value(gone, "nv_inference_count") == 13.0  # never back
    assert _value(gone, "latency_us", "latency_us_sum") == 25.0
    assert _value(gone, "nv_inference_pending_request_count") is None  # gauges: live only

    ledger.record("r3", ledger.ticket(), _page(1))  # a new replica counts from zero
    assert _value(ledger.total(["r3"]), "nv_inference_count") == 14.0


def test_a_late_answer_never_replaces_a_newer_one_or_revives_a_gone_replica() -> None:
    ledger = MetricsLedger()
    early, late = ledger.ticket(), ledger.ticket()
    ledger.record("r1", late, _page(9))
    ledger.record("r1", early, _page(3))
    assert _value(ledger.total(["r1"]), "nv_inference_count") == 9.0
    ledger.fold("r1")
    ledger.record("r1", ledger.ticket(), _page(100))
    assert _value(ledger.total([]), "nv_inference_count") == 9.0


def test_a_replica_missing_from_the_live_set_is_folded() -> None:
    ledger = MetricsLedger()
    ledger.record("r1", ledger.ticket(), _page(4))
    assert _value(ledger.total([]), "nv_inference_count") == 4.0
    assert _value(ledger.total([]), "nv_inference_count") == 4.0  # folded once


def test_models_merge_by_label_set() -> None:
    a = parse('# TYPE c counter\nc{model="a"} 1\n')
    b = parse('# TYPE c counter\nc{model="b"} 2\nc{model="a"} 3\n')
    merged = merge_families([a, b])
    assert merged["c"].samples == {("c", (("model", "a"),)): 4.0, ("c", (("model", "b"),)): 2.0}


def test_every_served_model_has_tritons_families_at_zero_until_a_replica_counts() -> None:
    merged = merge_families([_page(5)])  # model m version 1 reported by a replica
    families = with_zeros(merged, {"m": ["1"], "cold": ["1", "2"]})
    text = render(families.values())
    assert 'nv_inference_request_failure{model="cold",reason="REJECTED",version="2"} 0' in text
    assert 'nv_inference_request_failure{model="m",reason="BACKEND",version="1"} 0' in text
    assert 'nv_inference_request_success{model="cold",version="1"} 0' in text
    assert 'nv_inference_pending_request_count{model="cold",version="2"} 0' in text
    assert _value(families, "nv_inference_count") == 5  # what a replica reported is kept
    assert "# TYPE nv_inference_request_failure counter" in text
    assert "nv_inference_request_failure_total" not in text  # Triton's bare counter names


_SUMMARY = """\
# HELP nv_inference_request_summary_us Summary of inference request duration
# TYPE nv_inference_request_summary_us summary
nv_inference_request_summary_us{{model="m",quantile="0.5",version="1"}} {median}
nv_inference_request_summary_us_sum{{model="m",version="1"}} {total}
nv_inference_request_summary_us_count{{model="m",version="1"}} {count}
"""
_REQUEST_SUMMARY = "nv_inference_request_summary_us"


def _summary_page(median: float, total: float, count: int) -> dict[str, Family]:
    return parse(_SUMMARY.format(median=median, total=total, count=count))


def test_summary_quantiles_are_the_largest_replicas_not_a_sum() -> None:
    merged = merge_families([_summary_page(100, 1000, 10), _summary_page(300, 600, 2)])
    assert _value(merged, _REQUEST_SUMMARY) == 300.0  # an upper bound, never 400
    assert _value(merged, _REQUEST_SUMMARY, f"{_REQUEST_SUMMARY}_count") == 12.0
    assert _value(merged, _REQUEST_SUMMARY, f"{_REQUEST_SUMMARY}_sum") == 1600.0


def test_a_replica_gone_leaves_its_summary_count_not_its_quantiles() -> None:
    ledger = MetricsLedger()
    ledger.record("a", ledger.ticket(), _summary_page(900, 900, 1))
    ledger.fold("a")
    ledger.record("b", ledger.ticket(), _summary_page(50, 100, 2))
    total = ledger.total(["b"])
    assert _value(total, _REQUEST_SUMMARY) == 50.0
    assert _value(total, _REQUEST_SUMMARY, f"{_REQUEST_SUMMARY}_count") == 3.0


def test_a_model_at_zero_has_summaries_when_asked_and_no_latency_counters_when_not() -> None:
    settings = MetricsSettings(counter_latencies=False, summary_latencies=True,
                               summary_quantiles=((0.1, 0.0), (0.75, 0.01)))  # fmt: skip
    families = with_zeros({}, {"m": ["1"]}, settings)
    text = render(families.values())
    assert 'nv_inference_request_summary_us{model="m",quantile="0.75",version="1"} NaN' in text
    assert 'nv_inference_queue_summary_us_count{model="m",version="1"} 0\n' in text
    assert "_duration_us" not in text
    assert 'nv_inference_count{model="m",version="1"} 0\n' in text


def test_requests_held_at_the_front_door_are_pending_on_the_newest_version() -> None:
    families = with_zeros(_page(0, pending=2), {"m": ["1", "10", "2"]})
    families = with_held(families, {"m": 7, "gone": 3}, {"m": ["1", "10", "2"]})
    pending = families["nv_inference_pending_request_count"].samples
    assert pending[("nv_inference_pending_request_count", (("model", "m"), ("version", "10")))] == 7
    assert pending[("nv_inference_pending_request_count", (("model", "m"), ("version", "1")))] == 2
    assert not any(dict(labels)["model"] == "gone" for _, labels in pending)
