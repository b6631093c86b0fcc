"""The device check's vLLM row: SKIPPED naming what is missing; with the stand-in engine (and a
vllm_backend mirror), the row's own mechanics: serve model.py, generate == OpenAI completion."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from benchmarks.gpu_row import Skipped
from benchmarks.gpu_vllm import vllm_rows

ROOT = Path(__file__).resolve().parents[3]
STANDINS = ROOT / "tests" / "conformance" / "standins"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_without_vllm_the_row_is_skipped_naming_vllm(tmp_path: Path) -> None:
    with pytest.raises(Skipped) as caught:
        vllm_rows(ROOT, tmp_path)
    assert caught.value.missing == "vllm"
    assert "pip install vllm" in str(caught.value)


@pytest.mark.skipif(
    not os.environ.get("TRITON_VLLM_BACKEND_MIRROR"), reason="no $TRITON_VLLM_BACKEND_MIRROR"
)
def test_with_the_stand_in_engine_the_row_serves_model_py_and_compares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(STANDINS))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join((str(STANDINS), str(ROOT))))
    try:
        rows = vllm_rows(ROOT, tmp_path)
    finally:
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[name]
    assert [row.ok for row in rows] == [True]
    assert "1st generate" in rows[0].result and rows[0].verdict == "ok"
