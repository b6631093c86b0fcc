"""What the GPU machine brings: the wheels installed, the CUDA, cuDNN, TensorRT and driver
they run on, and the runtime's NVML metrics for its GPUs."""

from __future__ import annotations

from typing import Any

from benchmarks.gpu_row import Row


def environment_rows(torch: Any) -> list[Row]:
    """Which wheels are installed and which CUDA, cuDNN, TensorRT and driver they bring."""
    from importlib import metadata

    wheels = {}
    for dist in ("onnxruntime", "onnxruntime-gpu", "tensorrt", "tensorrt-cu12", "tensorrt-cu13",
                 "torch", "nvidia-ml-py"):  # fmt: skip
        try:
            wheels[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    try:
        import onnxruntime as ort

        providers = ",".join(
            p.removesuffix("ExecutionProvider") for p in ort.get_available_providers()
        )
    except ImportError:
        providers = "not installed"
    from snapshotter.trt_cache import tensorrt_version

    capability = "sm_{}{}".format(*torch.cuda.get_device_capability(0))
    both = "onnxruntime" in wheels and "onnxruntime-gpu" in wheels
    return [
        Row(
            "environment",
            ", ".join(f"{k} {v}" for k, v in wheels.items())
            + f"; onnxruntime providers {providers}; CUDA {torch.version.cuda}, cuDNN "
            f"{torch.backends.cudnn.version()}, TensorRT {tensorrt_version() or 'none'}",
            f"{torch.cuda.get_device_name(0)} {capability}, {torch.cuda.device_count()} GPU(s), "
            f"driver {_driver()}",
            "BOTH onnxruntime and onnxruntime-gpu: one package directory, the CPU build may "
            "shadow the CUDA EP"
            if both
            else "ok",
            ok=not both,
        )
    ]


def _driver() -> str:
    try:
        import pynvml
    except ImportError:
        return "unknown (nvidia-ml-py not installed)"
    try:
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
    except pynvml.NVMLError as exc:
        return f"unknown ({exc})"
    return version.decode() if isinstance(version, bytes) else str(version)


def metrics_rows() -> list[Row]:
    from runtime.observe.metrics import Metrics

    text = Metrics().exposition().decode()
    gpus = sum(1 for line in text.splitlines() if line.startswith("nv_gpu_memory_total_bytes{"))
    return [
        Row(
            "Triton GPU metrics (NVML)",
            f"nv_gpu_* for {gpus} GPU(s)",
            "nvidia-smi",
            "ok" if gpus else "absent (is nvidia-ml-py installed?)",
            ok=gpus > 0,
        )
    ]
