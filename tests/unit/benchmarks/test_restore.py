"""The restore benchmark runs without its optional peers: their rows say "not installed"."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from benchmarks import restore


def _fake_worker(method: str, model: str, work: Path, port: int, *, cold: bool) -> dict[str, Any]:
    seconds = 1.0 if method == "thaw" else 2.0
    return {"loadavg": 0.1, "output": "same", "seconds": seconds, "cpu_seconds": 1.5}


def test_missing_peer_is_a_row_not_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def worker(method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(method)
        return _fake_worker(method, *args, **kwargs)

    monkeypatch.setattr(restore, "PLAN", {"llm": ["safetensors", "tensorizer", "thaw"]})
    monkeypatch.setattr(restore, "run_worker", worker)
    monkeypatch.setattr(restore, "installed", lambda method: method != "tensorizer")
    args = argparse.Namespace(only="warm", repeats=2, pick="median")

    rows = restore.measure(Path("unused"), 0, args)

    assert "tensorizer" not in calls  # never spawned
    assert calls.count("thaw") == 2
    missing = [r for r in rows if r["method"] == "tensorizer"]
    assert missing == [{"model": "llm", "cache": "warm", "method": "tensorizer", "missing": True}]
    text = restore.table(rows, {"llm": 2_000_000_000})
    line = next(line for line in text.splitlines() if "| tensorizer |" in line)
    assert "not installed" in line
    assert line.count("|") == text.splitlines()[0].count("|")  # same columns as the header
    safetensors = next(line for line in text.splitlines() if "| safetensors |" in line)
    assert safetensors.endswith("| 2.00x |")


def test_installed_checks_every_package_of_a_method(monkeypatch: pytest.MonkeyPatch) -> None:
    present = {"runai_model_streamer"}
    monkeypatch.setattr(
        restore.importlib.util, "find_spec", lambda name: object() if name in present else None
    )
    assert restore.installed("runai-streamer")
    assert not restore.installed("s3-runai-streamer")  # needs runai_model_streamer_s3 too
    assert not restore.installed("tensorizer")
    assert all(restore.installed(m) for m in ("raw-read", "torch-load-mmap", "thaw", "s3-boto3"))
