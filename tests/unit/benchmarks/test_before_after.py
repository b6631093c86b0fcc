"""The before/after report: metrics out of the benchmarks' JSON, spreads, verdicts, the table."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from benchmarks.before_after import (
    ROOT,
    Job,
    Tree,
    _parse_args,
    benchmark_argv,
    foreign_modules,
    split_jobs,
)
from benchmarks.before_after_report import (
    Reading,
    Spread,
    cold_start_readings,
    compare,
    render,
    serve_throughput_readings,
    verdict,
)


def _cell(server: str, concurrency: int, rps: float | None, **extra: Any) -> dict[str, Any]:
    """One object of `serve_throughput.py --json` (its exact keys)."""
    measured = rps is not None
    return {
        "server": server,
        "protocol": extra.get("protocol", "http"),
        "model": extra.get("model", "add_sub"),
        "concurrency": concurrency,
        "note": extra.get("note", ""),
        "rps": rps,
        "p50_ms": extra.get("p50_ms", 5.0) if measured else None,
        "p99_ms": extra.get("p99_ms", 16.0) if measured else None,
        "errors": extra.get("errors", 0) if measured else None,
    }


def _cold_start(client_s: list[float], burst_p99_s: float, activator_rps: float) -> dict[str, Any]:
    """A `cold_start.py --json` document (its exact shape, two reps, one burst model)."""
    runs = [
        {"client_s": c, "claim": 3.8e-05, "restore": c / 2, "warmup": 0.02, "total": c - 0.01}
        for c in client_s
    ]
    return {
        "models": {
            "resnet50": {
                "bytes": 102_000_000,
                "naive_s": 1.9,
                "read_s": 0.05,
                "warm_inference_s": 0.04,
                "triton": "not requested",
                "thaw": runs,
                "thaw_no_image": [{**r, "client_s": r["client_s"] * 3} for r in runs],
            }
        },
        "loadavg_start": 3.0,
        "image_builds": {"resnet50": "ready"},
        "burst": {
            "tiny": {
                "requests": 200,
                "failed": 0,
                "statuses": [200],
                "p50_s": 0.3,
                "p99_s": burst_p99_s,
                "replicas_after": 2,
            }
        },
        "overhead": {
            "direct": {"p50_ms": 0.9, "rps": 2000.0},
            "activator": {"p50_ms": 1.0, "rps": activator_rps},
        },
        "loadavg_end": 3.5,
    }


def test_serve_throughput_keeps_thaws_cells_only_with_their_direction() -> None:
    cells = [
        _cell("thaw", 8, 900.0, p50_ms=8.5, p99_ms=20.0),
        _cell("triton", 8, 1200.0),
        _cell("thaw[process]", 1, 300.0),
        _cell("kserve", 1, None, note="not installed"),
    ]
    readings = serve_throughput_readings(cells)
    assert list(readings) == [
        "http add_sub c=8 req/s",
        "http add_sub c=8 p50 ms",
        "http add_sub c=8 p99 ms",
        "http add_sub c=8 errors",
        "http add_sub c=1 thaw[process] req/s",
        "http add_sub c=1 thaw[process] p50 ms",
        "http add_sub c=1 thaw[process] p99 ms",
        "http add_sub c=1 thaw[process] errors",
    ]
    assert readings["http add_sub c=8 req/s"] == Reading(900.0, True)
    assert readings["http add_sub c=8 p50 ms"] == Reading(8.5, False)
    assert readings["http add_sub c=8 errors"].hide_if_all_zero


def test_serve_throughput_cell_without_numbers_carries_its_note() -> None:
    readings = serve_throughput_readings(
        [
            _cell("thaw", 8, None, note="did not start"),
            _cell("thaw", 1, 0.0, p50_ms=math.nan, p99_ms=math.nan),  # nothing completed
        ]
    )
    assert readings["http add_sub c=8 req/s"] == Reading(None, True, "did not start")
    assert readings["http add_sub c=1 req/s"].value == 0.0
    assert readings["http add_sub c=1 p50 ms"].value is None  # NaN is no value


def test_cold_start_headline_readings() -> None:
    readings = cold_start_readings(_cold_start([0.2, 0.4, 0.3], 0.9, 1800.0))
    assert list(readings) == [
        "resnet50 cold start s",
        "resnet50 claim s",
        "resnet50 restore s",
        "resnet50 warmup s",
        "resnet50 cold start without images s",
        "burst tiny p50 s",
        "burst tiny p99 s",
        "burst tiny failed",
        "warm path direct p50 ms",
        "warm path direct req/s",
        "warm path activator p50 ms",
        "warm path activator req/s",
    ]
    assert readings["resnet50 cold start s"] == Reading(0.3, False)  # median of the reps
    assert readings["resnet50 restore s"].value == pytest.approx(0.15)
    assert readings["resnet50 cold start without images s"].value == pytest.approx(0.9)
    assert readings["warm path activator req/s"] == Reading(1800.0, True)
    # no naive, floor or Triton rows: they run no thaw code
    assert not any("naive" in name or "triton" in name for name in readings)


def test_cold_start_without_burst_or_big_model() -> None:
    document = _cold_start([0.2], 0.9, 1800.0)
    del document["burst"]
    del document["models"]["resnet50"]["thaw_no_image"]
    names = list(cold_start_readings(document))
    assert "burst tiny p50 s" not in names
    assert "resnet50 cold start without images s" not in names


@pytest.mark.parametrize(
    ("base", "head", "higher_is_better", "expected"),
    [
        ((100, 90, 110), (105, 95, 115), True, "within noise"),  # ranges overlap
        ((100, 99, 101), (108, 107, 109), True, "within noise"),  # apart, but within 10%
        ((100, 99, 101), (120, 119, 121), True, "head better"),  # more req/s
        ((100, 99, 101), (120, 119, 121), False, "head worse"),  # more milliseconds
        ((10, 9.9, 10.1), (5, 4.9, 5.1), False, "head better"),  # fewer seconds
        ((0, 0, 0), (3, 2, 4), False, "head worse"),  # errors appeared
    ],
)
def test_verdict(
    base: tuple[float, float, float],
    head: tuple[float, float, float],
    higher_is_better: bool,
    expected: str,
) -> None:
    assert verdict(Spread(*base, 2), Spread(*head, 2), higher_is_better, 0.10) == expected


def test_tolerance_is_the_callers() -> None:
    base, head = Spread(100, 99, 101, 2), Spread(108, 107, 109, 2)
    assert verdict(base, head, True, 0.10) == "within noise"
    assert verdict(base, head, True, 0.05) == "head better"


def test_compare_medians_spreads_and_ratio_over_rounds() -> None:
    base_runs = [serve_throughput_readings([_cell("thaw", 8, rps)]) for rps in (900.0, 1000.0)]
    head_runs = [serve_throughput_readings([_cell("thaw", 8, rps)]) for rps in (700.0, 720.0)]
    rows = {row.metric: row for row in compare(base_runs, head_runs, 0.10)}
    rps = rows["http add_sub c=8 req/s"]
    assert rps.base == Spread(950.0, 900.0, 1000.0, 2)
    assert rps.head == Spread(710.0, 700.0, 720.0, 2)
    assert rps.ratio == pytest.approx(710 / 950)
    assert rps.verdict == "head worse"
    assert rows["http add_sub c=8 p50 ms"].verdict == "within noise"  # same 5 ms both sides
    assert "http add_sub c=8 errors" not in rows  # 0 everywhere: no row


def test_compare_shows_errors_once_any_run_has_some() -> None:
    base_runs = [serve_throughput_readings([_cell("thaw", 8, 900.0)])]
    head_runs = [serve_throughput_readings([_cell("thaw", 8, 900.0, errors=4)])]
    row = next(r for r in compare(base_runs, head_runs, 0.10) if r.metric.endswith("errors"))
    assert row.ratio is None  # base 0: no ratio
    assert row.verdict == "head worse"


def test_compare_says_which_side_has_no_value_and_why() -> None:
    base_runs = [serve_throughput_readings([_cell("thaw", 8, 900.0)])]
    head_runs = [serve_throughput_readings([_cell("thaw", 8, None, note="did not start")])] * 2
    row = compare(base_runs, head_runs, 0.10)[0]
    assert row.head is None and row.ratio is None
    assert row.verdict == "no head value (did not start)"


def test_compare_keeps_a_metric_seen_on_one_side_only() -> None:
    base_runs = [cold_start_readings(_cold_start([0.2], 0.9, 1800.0))]
    head_document = _cold_start([0.2], 0.9, 1800.0)
    del head_document["burst"]
    rows = {r.metric: r for r in compare(base_runs, [cold_start_readings(head_document)], 0.1)}
    assert rows["burst tiny p99 s"].verdict == "no head value"
    assert rows["resnet50 cold start s"].verdict == "within noise"


def test_render_table() -> None:
    base_runs = [cold_start_readings(_cold_start([c], 0.9, 1800.0)) for c in (0.30, 0.34)]
    head_runs = [cold_start_readings(_cold_start([c], 2.5, 1750.0)) for c in (0.31, 0.33)]
    table = render(compare(base_runs, head_runs, 0.10)).splitlines()
    assert table[0] == (
        "| metric | base median | base range | head median | head range | head/base | verdict |"
    )
    assert (
        "| resnet50 cold start s | 0.320 | 0.300-0.340 | 0.320 | 0.310-0.330 | 1.000 "
        "| within noise |"
    ) in table
    assert "| burst tiny p99 s | 0.900 | 0.900-0.900 | 2.50 | 2.50-2.50 | 2.778 | head worse |" in (
        table
    )
    assert "| warm path activator req/s | 1800 | 1800-1800 | 1750 | 1750-1750 | 0.972 " in (
        "\n".join(table)
    )
    assert "| resnet50 claim s | 3.8e-05 | 3.8e-05-3.8e-05 | 3.8e-05 |" in "\n".join(table)


# ---- the runner's pure parts ------------------------------------------------------------------


def test_split_jobs() -> None:
    assert split_jobs(["serve_throughput", "--duration-s", "1"]) == [
        Job("serve_throughput", ("--duration-s", "1"))
    ]
    assert split_jobs(["serve_throughput", "--", "cold_start", "--reps", "1"]) == [
        Job("serve_throughput", ()),
        Job("cold_start", ("--reps", "1")),
    ]
    with pytest.raises(ValueError, match="benchmark name"):
        split_jobs(["--duration-s", "1"])
    with pytest.raises(ValueError, match="name a benchmark"):
        split_jobs([])


def test_benchmark_argv_defaults(tmp_path: Path) -> None:
    tree = Tree("base", "77d39ca", tmp_path / "base", "77d39ca")
    out = tmp_path / "run.json"
    serve = benchmark_argv(Job("serve_throughput", ("--duration-s", "1")), tree, out, tmp_path)
    assert serve == [
        "--duration-s", "1", "--peers", "thaw", "--repo", str(ROOT / "model_repository"),
        "--json", str(out),
    ]  # fmt: skip
    given = benchmark_argv(
        Job("serve_throughput", ("--peers=thaw,triton", "--repo", "r")), tree, out, tmp_path
    )
    assert given == ["--peers=thaw,triton", "--repo", "r", "--json", str(out)]
    cold = benchmark_argv(Job("cold_start", ("--work", "/w", "--reps", "1")), tree, out, tmp_path)
    assert cold == [
        "--reps", "1", "--repo", str(ROOT / "model_repository"), "--work", "/w/work-base",
        "--json", str(out),
    ]  # fmt: skip
    default_work = benchmark_argv(Job("cold_start", ()), tree, out, tmp_path)
    assert default_work[default_work.index("--work") + 1] == str(tmp_path / "work-base")
    with pytest.raises(ValueError, match="--json"):
        benchmark_argv(Job("cold_start", ("--json", "x")), tree, out, tmp_path)


def test_foreign_modules(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    files = {
        "runtime": str(tree / "runtime" / "__init__.py"),
        "runtime.config": str(tree / "runtime" / "config.py"),
        "thawserver": str(tmp_path / "other" / "thawserver" / "__init__.py"),
        "thaw.namespace": None,
    }
    assert foreign_modules(tree, files) == {"thawserver": files["thawserver"]}


def test_help_prints_the_usage_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    """`before_after.py --help` (no `--`) is help, not "name the benchmark after `--`"."""
    with pytest.raises(SystemExit) as exited:
        _parse_args(["--help"])
    assert exited.value.code == 0
    assert "--base REV" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        _parse_args(["--base", "HEAD"])
    assert exited.value.code == 2
    assert "name the benchmark after `--`" in capsys.readouterr().err
