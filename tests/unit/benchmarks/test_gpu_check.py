"""benchmarks/gpu_check.py off a GPU: the no-CUDA exit, the table's rows, the generated inputs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks import gpu_models
from benchmarks.gpu_check import Check, Row

ROOT = Path(__file__).resolve().parents[3]


def test_without_cuda_it_says_so_and_exits_0() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the check would run for real")
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--work", "/nonexistent"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("gpu_check: no CUDA device (")
    assert len(done.stdout.splitlines()) == 1


def test_every_step_becomes_rows_a_skip_or_a_failure() -> None:
    check = Check(budget_s=60)
    check.step("fine", lambda: [Row("fine", "1.0 GB/s", "ceiling")])

    def missing() -> list[Row]:
        raise ImportError("no module", name="onnxruntime_gpu")

    def broken() -> list[Row]:
        raise RuntimeError("CUDA error: an illegal memory access")

    check.step("needs ort-gpu", missing)
    check.step("broken", broken)
    late = Check(budget_s=-1)
    late.step("late", lambda: [Row("never", "")])
    assert [r.result for r in check.rows[1:]] == [
        "skipped: onnxruntime_gpu not installed",
        "FAILED: RuntimeError('CUDA error: an illegal memory access')",
    ]
    assert [r.ok for r in check.rows] == [True, True, False]
    assert late.rows[0].result.startswith("skipped: time budget")
    table = check.table("H200").splitlines()
    assert table[2] == "| check | result | baseline (same run) | verdict |"
    assert table[4] == "| fine | 1.0 GB/s | ceiling |  |"


def test_weight_images_are_distinct_tensors_of_the_asked_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from snapshotter import ImageLoader, ImageRef

    monkeypatch.setattr(gpu_models, "TENSOR_BYTES", 1 << 20)
    gpu_models.weights_image(tmp_path / "cache", tmp_path, "w", 4 / 1024, target="cpu")
    image = ImageLoader(None, tmp_path / "cache", "cpu").restore(ImageRef("w", "1", "cpu"))
    assert image.manifest.weight_bytes == 4 << 20 and len(image.tensors) == 4
    firsts = {bytes(t[:1].tobytes()) for t in image.tensors.values()}
    assert len(firsts) == 4  # distinct: content addressing cannot fold them into one chunk
    assert not (tmp_path / "repo" / "w" / "1" / "model.safetensors").exists()


def test_the_generated_models_run_and_their_configs_ask_for_a_gpu(tmp_path: Path) -> None:
    import onnxruntime as ort

    from tritonconfig import parse_config, tensorrt_parameters

    mlp = gpu_models.torchscript_mlp(tmp_path, "mlp", 32 * 32 * 4 / (1 << 30), width=32)
    module = torch.jit.load(str(mlp / "1" / "model.pt"))
    assert module(torch.ones(2, 32)).shape == (2, 32)
    onnx_dir = gpu_models.onnx_mlp(tmp_path, "ort", layers=2, width=16, tensorrt=True)
    session = ort.InferenceSession(str(onnx_dir / "1" / "model.onnx"))
    (out,) = session.run(None, {"INPUT0": np.ones((3, 16), np.float32)})
    assert out.shape == (3, 16)
    config = parse_config((onnx_dir / "config.pbtxt").read_text(), "config.pbtxt")
    assert config.instance_group[0].kind == config.instance_group[0].KIND_GPU
    assert tensorrt_parameters(config) is not None
