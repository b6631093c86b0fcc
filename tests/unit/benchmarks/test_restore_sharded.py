"""benchmarks/restore_sharded.py and sharded_set.py: the checkpoints, the worker, the verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import restore_sharded, sharded_set


def _row(cache: str, case: str, method: str, seconds: float, **extra: Any) -> dict[str, Any]:
    files = list(sharded_set.TOKENIZER_FILES)
    return {"cache": cache, "case": case, "method": method, "seconds": seconds,
            "cpu_seconds": seconds, "bytes": 1 << 30 if case == "single" else 4 << 30,
            "files": files, **extra}  # fmt: skip


def _rows(sharded_thaw_s: float) -> list[dict[str, Any]]:
    rows = []
    for cache in ("warm", "cold"):
        for method in restore_sharded.METHODS:
            rows.append(_row(cache, "single", method, 1.0))
            rows.append(_row(cache, "sharded", method, sharded_thaw_s))
    return rows


def test_the_verdict_holds_the_sharded_bandwidth_to_within_10_percent_of_the_single() -> None:
    ok = restore_sharded.verdict(_rows(4.4))  # 4 GiB in 4.4 s vs 1 GiB in 1 s: 0.91
    assert len(ok) == 4 and all("within the 10% goal" in line for line in ok)
    assert all(line.endswith("tokenizer files restored: True") for line in ok)
    short = restore_sharded.verdict(_rows(4.6))  # 0.87
    assert all("OUTSIDE the 10% goal" in line for line in short)
    table = restore_sharded.table(_rows(4.6), 4.0, 32)
    assert "| warm | sharded (4 GiB, 32 files) | thaw | 4.600 | 0.93 | 0.87 | 1.00x |" in table


def test_a_checkpoint_builds_and_the_worker_restores_it_with_its_tokenizer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sharded_set, "TENSOR_BYTES", 1 << 20)
    monkeypatch.setattr(restore_sharded, "SINGLE_GIB", 2 / 1024)
    restore_sharded.prepare(tmp_path, 3 / 1024, 4)
    case = restore_sharded.case_dir(tmp_path, "sharded", 3 / 1024, 4)
    version = case / "repo" / "llm" / "1"
    index = json.loads((version / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == [
        f"model-{k:05d}-of-00004.safetensors" for k in range(1, 5)
    ]
    for method in restore_sharded.METHODS:
        got = restore_sharded.worker(method, case)
        assert got["bytes"] == 3 << 20, method
    assert set(sharded_set.TOKENIZER_FILES) <= set(restore_sharded.worker("thaw", case)["files"])
    single = restore_sharded.case_dir(tmp_path, "single", 3 / 1024, 4)
    assert [p.name for p in (single / "repo" / "llm" / "1").iterdir()] == ["model.safetensors"]
