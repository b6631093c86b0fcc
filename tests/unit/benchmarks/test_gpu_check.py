"""benchmarks/gpu_check.py off a GPU: the no-CUDA exits, strict's rules, the rows, the inputs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks import gpu_models, gpu_restore, gpu_warm_process
from benchmarks.gpu_check import PLAN, Check, Row, selected_steps, strict_reasons
from benchmarks.gpu_row import Skipped

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

    def no_second_gpu() -> list[Row]:
        raise Skipped("needs 2 GPUs, this machine has 1", hardware=True)

    check.step("needs ort-gpu", missing)
    check.step("broken", broken)
    check.step("two gpus", no_second_gpu)
    late = Check(budget_s=-1)
    late.step("late", lambda: [Row("never", "")])
    assert [r.result for r in check.rows[1:]] == [
        "skipped: onnxruntime_gpu not installed",
        "FAILED: RuntimeError('CUDA error: an illegal memory access')",
        "skipped: needs 2 GPUs, this machine has 1",
    ]
    assert [r.ok for r in check.rows] == [True, True, False, True]
    assert check.rows[1].missing == "onnxruntime_gpu" and check.rows[3].hardware
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


def test_strict_without_cuda_fails_for_that_reason_only_and_lists_every_row() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the check would run for real")
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--strict", "--work",
         "/nonexistent"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0, done.stdout
    out = done.stdout
    reasons = out.split("gpu_check --strict: FAILED, 1 reason:\n", 1)[1].strip().splitlines()
    assert len(reasons) == 1 and reasons[0].strip().startswith("no CUDA device (")
    for step in PLAN:  # every row it would run on a GPU is listed
        assert f"- {step.name}" in out
        for row in step.proves:
            assert f"    - {row}" in out
    quick = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--strict", "--quick"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert quick.returncode != 0 and "(full check only)" not in quick.stdout
    assert "- fork-server child" in quick.stdout and "- torch.compile" not in quick.stdout


def test_strict_fails_on_any_skip_the_machine_could_have_run() -> None:
    rows = [
        Row("ran", "1 GB/s"),
        Row("late", "skipped: time budget", skipped="time budget (500 s of 480)"),
        Row("ort", "skipped: ...", skipped="no CUDA EP", missing="onnxruntime-gpu"),
        Row("two gpus", "skipped: ...", skipped="needs 2 GPUs", hardware=True),
        Row("broken", "FAILED: ...", ok=False),
    ]
    assert strict_reasons(rows, frozenset()) == [
        "skipped: late (time budget (500 s of 480))",
        "skipped: ort (no CUDA EP)",
        "failed: broken",
    ]
    # Declared absent on purpose: accepted; the budget and the failure never are.
    assert strict_reasons(rows, frozenset({"onnxruntime-gpu"})) == [
        "skipped: late (time budget (500 s of 480))",
        "failed: broken",
    ]
    assert strict_reasons(rows[:1] + rows[3:4], frozenset()) == []


def test_the_quick_check_covers_the_gpu_proofs_and_the_full_one_everything() -> None:
    quick = {step.name for step in PLAN if step.quick}
    assert {"environment", "torch in the device arena", "onnxruntime CUDA EP",
            "onnxruntime device initializers", "CUDA warm-up", "CUDA graphs", "KIND_AUTO",
            "out of memory", "fork-server child"} <= quick  # fmt: skip
    assert {"TensorRT EP-context moved", "torch.compile"} <= {s.name for s in PLAN} - quick


def test_restores_the_check_times_read_as_a_servers_do_into_the_ring(tmp_path: Path) -> None:
    from snapshotter import DeviceConfig, StagingPool

    pool = StagingPool(slot_bytes=1 << 20, slots=2)
    loader = gpu_warm_process.ring_loader(tmp_path, "cpu", pool)
    # A restore into a GPU takes its readers from DeviceConfig: the check times a server's.
    assert loader.device_config == DeviceConfig()
    assert 4 <= loader.device_config.read_threads <= 16
    assert gpu_warm_process.ring_loader(tmp_path, "cpu", pool, readers=12).device_config == (
        DeviceConfig(read_threads=12)
    )  # the ring-shapes step's
    assert loader.staging is pool


def test_the_proofs_models_run_and_fallbacks_are_summed_per_model(tmp_path: Path) -> None:
    from benchmarks.gpu_manager import fallbacks
    from benchmarks.gpu_torch_model import cpu_reference, torch_linear_model

    model = torch_linear_model(tmp_path, "m", width=8, export=True)
    x = np.ones((2, 8), np.float32)
    assert cpu_reference(model, x).shape == (2, 8)
    assert "model.pt2" in (model / "config.pbtxt").read_text()
    text = (
        'thaw_device_fallbacks_total{model="m",reason="no_cuda"} 1.0\n'
        'thaw_device_fallbacks_total{model="m",reason="cuda_graph_capture"} 2.0\n'
        'thaw_device_fallbacks_total{model="other",reason="no_cuda"} 5.0\n'
    )
    assert fallbacks(text, "m") == 3.0


def test_the_sharded_rows_restore_through_the_ring_on_a_fake_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from snapshotter import DeviceConfig, ImageLoader, StagingPool
    from tests.fakes.fake_device import FakeDevice

    device = FakeDevice()
    pool = StagingPool(slot_bytes=1 << 20, slots=3)
    pool.allocate(device)

    def fake_ring_loader(cache: Path, target: str, pool: object, **kwargs: object) -> object:
        return ImageLoader(
            None, cache, target, staging=pool, device=DeviceConfig(read_threads=2),
            copier_factory=lambda _: device, device_memory=device, **kwargs,  # type: ignore[arg-type]
        )  # fmt: skip

    monkeypatch.setattr(gpu_models, "TENSOR_BYTES", 1 << 20)
    monkeypatch.setattr(gpu_restore, "warm_pool", lambda: pool)
    monkeypatch.setattr(gpu_restore, "ring_loader", fake_ring_loader)
    monkeypatch.setattr(gpu_restore, "timed", lambda torch, fn: (0.01, fn()))
    try:
        rows = gpu_restore.sharded_rows(torch, tmp_path, [8 / 1024], single_gib=4 / 1024)
    finally:
        device.close()
    assert rows[0].check.startswith("restore 0.0078125 GiB sharded checkpoint (8 shards + tok")
    assert rows[1].ok and rows[1].verdict == "ok", rows[1]
    assert "bytes match: True; files: True" in rows[1].result
    assert device.copies > 8 and all(c.from_pinned for c in device.copy_log)


def test_steps_selects_named_steps_in_plan_order_and_refuses_unknown_names() -> None:
    chosen = selected_steps(PLAN, "torch.compile, cold start", quick=True)
    assert [step.name for step in chosen] == ["cold start", "torch.compile"]
    assert [s.name for s in selected_steps(PLAN, None, quick=True)] == [
        s.name for s in PLAN if s.quick
    ]
    assert len(selected_steps(PLAN, None, quick=False)) == len(PLAN)
    with pytest.raises(ValueError, match=r"unknown step.*'no such'.*the steps are: environment"):
        selected_steps(PLAN, "cold start,no such", quick=False)


def test_the_device_scripts_full_steps_are_steps_of_the_plan() -> None:
    import re

    script = (ROOT / "benchmarks" / "gpu_device_run.sh").read_text()
    (names,) = re.findall(r'--steps "([^"]+)"', script)
    chosen = selected_steps(PLAN, names, quick=False)  # an unknown name raises
    assert {step.name for step in PLAN if not step.quick} <= {step.name for step in chosen}
