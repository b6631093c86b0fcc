"""benchmarks/front_before_after.py: its cells, its table, its refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.front_before_after import Sample, main, parse_cells, table


def test_cells_are_protocol_and_concurrency() -> None:
    assert parse_cells("json:1,grpc:8,") == [("json", 1), ("grpc", 8)]
    for bad in ("", "json", "json:0", "smtp:1", "json:x"):
        with pytest.raises(ValueError):
            parse_cells(bad)


def test_the_table_gives_medians_per_binary() -> None:
    samples = {
        ("a", "json", 1): [Sample(100, 300, 1000), Sample(120, 320, 900), Sample(90, 280, 1100)],
        ("b", "json", 1): [Sample(80, 250, 1200)],
    }
    text = table(["a", "b"], [("json", 1)], samples)
    assert text.splitlines()[-1] == "| json c=1 | 100 | 300 | 1000 | 80 | 250 | 1200 |"


def test_a_missing_binary_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--binary", str(tmp_path / "nothing")])
    assert exited.value.code == 2
