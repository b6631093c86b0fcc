"""benchmarks/front_allocations.py: its refusals where it cannot count."""

from __future__ import annotations

import pytest

from benchmarks import front_allocations


def test_without_perf_it_says_so_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(front_allocations.shutil, "which", lambda _name: None)
    assert front_allocations.main([]) == 2
    assert "`perf` is not installed" in capsys.readouterr().err


def test_an_unknown_protocol_is_refused() -> None:
    with pytest.raises(SystemExit) as exited:
        front_allocations.main(["--protocols", "json,smtp"])
    assert exited.value.code == 2


def test_a_probe_perf_cannot_add_is_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse() -> None:
        raise RuntimeError("perf probe on malloc: Permission denied")

    monkeypatch.setattr(front_allocations.shutil, "which", lambda _name: "/usr/bin/perf")
    monkeypatch.setattr(front_allocations, "add_probes", refuse)
    assert front_allocations.main([]) == 2
    assert "Permission denied" in capsys.readouterr().err
