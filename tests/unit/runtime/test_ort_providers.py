"""onnxruntime providers: the plan's provider first, cuDNN's search set, the session checked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from runtime.backends.base import LoadContext
from runtime.backends.ort_providers import (
    CPU_EP,
    CUDA_EP,
    TRT_EP,
    check_providers,
    wanted_providers,
)
from runtime.errors import RepositoryError
from tests.fixtures.onnx_models import make_onnx_add
from tritonconfig import parse_config

GPU_CONFIG = 'name: "m" backend: "onnxruntime"\n'


def _ctx(extra: str = "", *, kind: str = "KIND_GPU", device: int = 1) -> LoadContext:
    config = parse_config(GPU_CONFIG + extra, "config.pbtxt")
    return LoadContext("m", "1", Path("."), Path("."), config, kind, device)


def test_a_gpu_instance_asks_for_the_cuda_ep_on_its_device_with_a_fast_cudnn_search() -> None:
    wanted = wanted_providers(_ctx(), [CUDA_EP, CPU_EP])
    assert wanted == [
        (CUDA_EP, {"device_id": "1", "cudnn_conv_algo_search": "HEURISTIC"}),
        CPU_EP,
    ]
    assert wanted_providers(_ctx(kind="KIND_CPU"), [CUDA_EP, CPU_EP]) == [CPU_EP]


@pytest.mark.parametrize(
    ("value", "algo"),
    [("0", "EXHAUSTIVE"), ("1", "HEURISTIC"), ("2", "DEFAULT"), ("exhaustive", "EXHAUSTIVE")],
)
def test_tritons_cudnn_conv_algo_search_parameter_is_honoured(value: str, algo: str) -> None:
    extra = f'parameters {{ key: "cudnn_conv_algo_search" value: {{ string_value: "{value}" }} }}'
    cuda = wanted_providers(_ctx(extra), [CUDA_EP, CPU_EP])[0]
    assert cuda[1]["cudnn_conv_algo_search"] == algo


def test_a_bad_cudnn_search_names_the_parameter() -> None:
    extra = 'parameters { key: "cudnn_conv_algo_search" value: { string_value: "7" } }'
    with pytest.raises(RepositoryError, match="cudnn_conv_algo_search` = '7'"):
        wanted_providers(_ctx(extra), [CUDA_EP, CPU_EP])


def test_a_gpu_instance_without_the_cuda_ep_is_refused_naming_the_package() -> None:
    with pytest.raises(RepositoryError, match="install onnxruntime-gpu"):
        wanted_providers(_ctx(), [CPU_EP])


CUDA_WANTED = [(CUDA_EP, {"device_id": "0"}), CPU_EP]
TRT_WANTED = [(TRT_EP, {}), (CUDA_EP, {"device_id": "0"}), CPU_EP]


def test_a_session_on_the_planned_provider_passes() -> None:
    assert check_providers("m", CUDA_WANTED, [CUDA_EP, CPU_EP]).fallback is None
    assert check_providers("m", TRT_WANTED, [TRT_EP, CUDA_EP, CPU_EP]).fallback is None
    assert check_providers("m", [CPU_EP], [CPU_EP]).fallback is None


def test_a_gpu_session_that_came_up_on_the_cpu_fails_the_load() -> None:
    # What onnxruntime's Python fallback does when the CUDA EP fails at creation.
    with pytest.raises(RepositoryError, match="did not enable CUDAExecutionProvider"):
        check_providers("m", CUDA_WANTED, [CPU_EP])
    with pytest.raises(RepositoryError, match="did not enable TensorrtExecutionProvider"):
        check_providers("m", TRT_WANTED, [CPU_EP])


def test_a_tensorrt_session_that_came_up_on_cuda_is_a_counted_fallback() -> None:
    check = check_providers("m", TRT_WANTED, [CUDA_EP, CPU_EP])
    assert check.fallback == "tensorrt_ep_failed" and "running on CUDAExecutionProvider" in (
        check.message
    )


def test_fallbacks_a_backend_reports_reach_the_loader() -> None:
    seen: list[tuple[str, str]] = []
    ctx = LoadContext(
        "m", "1", Path("."), Path("."), parse_config(GPU_CONFIG, "c"), "KIND_GPU", 0,
        on_fallback=lambda reason, message: seen.append((reason, message)),
    )  # fmt: skip
    ctx.fallback("cuda_graph_capture", "capture failed; running eagerly")
    assert seen == [("cuda_graph_capture", "capture failed; running eagerly")]


def test_a_loaded_session_has_onnxruntimes_python_fallback_off(tmp_path: Path) -> None:
    from runtime.backends.onnxruntime_backend import OnnxRuntimeBackend
    from tritonconfig import complete_config

    model = make_onnx_add(tmp_path)
    config = parse_config((model / "config.pbtxt").read_text(), "c")
    complete_config(config, model, "c", gpu_available=False, require_model_files=True)
    backend = OnnxRuntimeBackend()
    backend.load(LoadContext("onnx_add", "1", model / "1", model, config, "KIND_CPU", 0))
    # The wrapper's own flag that `run` consults before moving a session to other providers
    # after an EP error (onnxruntime_inference_collection.py).
    assert backend._session._enable_fallback is False
    assert backend.providers == [CPU_EP]
    x = np.ones((1, 4), np.float32)
    from runtime.inference import InferRequest, InferTensor

    (response,) = backend.execute(
        [InferRequest("onnx_add", "1", [InferTensor("INPUT0", "FP32", (1, 4), x)])]
    )
    assert response.outputs[0].shape == (1, 4)
