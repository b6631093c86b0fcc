"""The stub round-trip benchmark measures both modes in one run, each row with its own CPU."""

from __future__ import annotations

import pytest

from benchmarks import stub_round_trip
from runtime.python import pb_utils
from runtime.python.server_host import ServerHost


def test_one_run_reports_the_stub_and_its_in_process_baseline(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert stub_round_trip.main(["--requests", "4000", "--rounds", "1"]) == 0
    report = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line for line in report.splitlines() if "| " in line}
    process = [cell.strip() for cell in rows["process"].split("|")[1:-1]]
    in_process = [cell.strip() for cell in rows["in_process"].split("|")[1:-1]]
    assert float(process[3]) > 0  # the stub process's own CPU, read from /proc
    assert in_process[3] == "-"  # no stub: the baseline runs on the loop
    assert all(float(row[1].split()[0]) > 0 for row in (process, in_process))
    assert "load average" in report.splitlines()[-1]
    assert not isinstance(pb_utils.current_host(), ServerHost)  # the run's host is gone again


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(SystemExit):
        stub_round_trip.main(["--modes", "threads"])
