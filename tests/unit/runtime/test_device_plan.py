"""Device planning: which device each instance runs on, where its image is restored, fallbacks."""

from __future__ import annotations

import pytest

from runtime.devices.plan import (
    CUDA_EP,
    TRT_EP,
    Capabilities,
    DevicePlanError,
    FallbackReason,
    needs_gpu,
    plan_devices,
)
from tritonconfig import parse_config
from tritonconfig.defaults import fill_defaults
from tritonconfig.schema import mc

NO_CUDA = Capabilities(cuda_devices=0, no_cuda_reason="no CUDA device visible")
TWO_GPUS_ORT_GPU = Capabilities(
    cuda_devices=2,
    ort_providers=frozenset({CUDA_EP, "CPUExecutionProvider"}),
    tensorrt=True,
)
TRT_ACCELERATOR = """
optimization { execution_accelerators { gpu_execution_accelerator : [ { name : "tensorrt" } ] } }
"""


def _config(
    backend: str, groups: str, extra: str = "", *, gpu_available: bool = True
) -> mc.ModelConfig:
    platform = {"onnxruntime": "onnxruntime_onnx", "pytorch": "pytorch_libtorch",
                "tensorrt": "tensorrt_plan"}[backend]  # fmt: skip
    config = parse_config(
        f'name: "m" platform: "{platform}" backend: "{backend}"\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        f"instance_group [ {groups} ]\n{extra}",
        "config.pbtxt",
    )
    fill_defaults(config, gpu_available=gpu_available)
    return config


def test_gpu_groups_put_count_instances_on_each_gpu_and_restore_once_per_device() -> None:
    # Triton's rule: `count` instances on EACH of the group's GPUs.
    config = _config(
        "pytorch",
        "{ kind: KIND_GPU count: 3 gpus: [ 0, 1 ] }, { kind: KIND_CPU count: 1 }",
    )
    plan = plan_devices(config, TWO_GPUS_ORT_GPU)
    assert [p.device for p in plan.placements] == ["cuda:0"] * 3 + ["cuda:1"] * 3 + ["cpu"]
    assert plan.restore_devices == ("cuda:0", "cuda:1", "cpu")
    assert plan.fallbacks == ()
    assert [p.group for p in plan.placements] == ["m_0"] * 6 + ["m_1"]
    assert [p.index for p in plan.placements] == [0, 1, 2, 3, 4, 5, 0]


def test_kind_auto_resolves_to_gpu_0_when_the_server_has_a_gpu() -> None:
    auto = _config("pytorch", "{ kind: KIND_AUTO count: 2 }")
    assert needs_gpu(auto)
    assert [p.device for p in plan_devices(auto, TWO_GPUS_ORT_GPU).placements] == ["cuda:0"] * 2
    cpu_server = _config("pytorch", "{ kind: KIND_AUTO }", gpu_available=False)
    assert not needs_gpu(cpu_server)
    assert plan_devices(cpu_server, NO_CUDA).restore_devices == ("cpu",)


def test_no_cuda_falls_back_to_cpu_with_a_reason() -> None:
    plan = plan_devices(_config("pytorch", "{ kind: KIND_GPU count: 2 gpus: [ 1 ] }"), NO_CUDA)
    assert [p.device for p in plan.placements] == ["cpu", "cpu"]
    assert plan.restore_devices == ("cpu",)
    (fallback,) = plan.fallbacks
    assert fallback.reason is FallbackReason.NO_CUDA
    assert "asks for GPU 1: no CUDA device visible; running on CPU" in fallback.message


def test_onnxruntime_without_the_cuda_ep_falls_back_to_cpu() -> None:
    caps = Capabilities(cuda_devices=1)  # a GPU, but onnxruntime is the CPU build
    plan = plan_devices(_config("onnxruntime", "{ kind: KIND_GPU }"), caps)
    assert plan.placements[0].device == "cpu"
    assert plan.fallbacks[0].reason is FallbackReason.NO_ONNXRUNTIME_CUDA
    assert "onnxruntime-gpu is not installed" in plan.fallbacks[0].message


def test_onnxruntime_on_a_gpu_restores_on_the_host_so_vram_holds_its_weights_once() -> None:
    # add_external_initializers copies device OrtValues to the host and back (onnxruntime#29009):
    # a device restore would hold the weights twice. Until a zero-copy path is proven, host.
    config = _config("onnxruntime", "{ kind: KIND_GPU gpus: [ 1 ] }")
    placement = plan_devices(config, TWO_GPUS_ORT_GPU).placements[0]
    assert placement.device == "cuda:1" and placement.restore_device == "cpu"
    torch_config = _config("pytorch", "{ kind: KIND_GPU gpus: [ 1 ] }")
    assert plan_devices(torch_config, TWO_GPUS_ORT_GPU).restore_devices == ("cuda:1",)


def test_the_tensorrt_accelerator_without_the_trt_ep_runs_on_cuda_and_says_so() -> None:
    config = _config("onnxruntime", "{ kind: KIND_GPU }", TRT_ACCELERATOR)
    plan = plan_devices(config, TWO_GPUS_ORT_GPU)
    assert plan.placements[0].device == "cuda:0"
    assert plan.fallbacks[0].reason is FallbackReason.NO_TENSORRT
    with_trt = Capabilities(cuda_devices=1, ort_providers=frozenset({CUDA_EP, TRT_EP}))
    placement = plan_devices(config, with_trt).placements[0]
    assert placement.device == "cuda:0" and placement.restore_device == "cpu"
    assert placement.fallback is None


def test_a_gpu_id_this_machine_lacks_is_refused() -> None:
    with pytest.raises(DevicePlanError, match="asks for GPU 5, and this machine has 2"):
        plan_devices(_config("pytorch", "{ kind: KIND_GPU gpus: [ 0, 5 ] count: 2 }"),
                     TWO_GPUS_ORT_GPU)  # fmt: skip


def test_a_gpu_below_the_minimum_compute_capability_is_refused_in_tritons_words() -> None:
    """`--min-supported-compute-capability`: core's ValidateInstanceGroup text, the supported
    GPUs listed."""
    caps = Capabilities(cuda_devices=3, unsupported_gpus=frozenset({1}), min_compute_capability=7.5)
    with pytest.raises(DevicePlanError) as info:
        plan_devices(_config("pytorch", "{ kind: KIND_GPU gpus: [ 0, 1 ] }"), caps)
    assert str(info.value) == (
        "instance group m_0 of model m specifies invalid or unsupported gpu id 1. GPUs with at "
        "least the minimum required CUDA compute compatibility of 7.500000 are: 0, 2"
    )
    placed = plan_devices(_config("pytorch", "{ kind: KIND_GPU gpus: [ 0, 2 ] }"), caps)
    assert [p.device for p in placed.placements] == ["cuda:0", "cuda:2"]


def test_a_tensorrt_plan_has_no_cpu_fallback() -> None:
    config = _config("tensorrt", "{ kind: KIND_GPU }")
    with pytest.raises(DevicePlanError, match="TensorRT plan and needs a GPU: no CUDA"):
        plan_devices(config, NO_CUDA)
    with pytest.raises(DevicePlanError, match="`tensorrt` package is not installed"):
        plan_devices(config, Capabilities(cuda_devices=1))
    placement = plan_devices(config, TWO_GPUS_ORT_GPU).placements[0]
    assert placement.device == "cuda:0" and placement.restore_device == "cpu"


def test_the_local_inventory_reads_this_machine() -> None:
    import torch

    from runtime.devices.inventory import LocalInventory

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    caps = LocalInventory().capabilities(onnxruntime=True, tensorrt=True)
    assert caps.cuda_devices == 0 and "CUDA device" in caps.no_cuda_reason
    assert "CPUExecutionProvider" in caps.ort_providers
    torch_caps = LocalInventory().capabilities(onnxruntime=False, tensorrt=False)
    assert torch_caps.cuda_devices == 0 and "CUDA" in torch_caps.no_cuda_reason


def test_onnxruntime_gpus_are_counted_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime-gpu beside a CPU build of torch: the GPU scan, not torch, says how many."""
    from runtime.devices import inventory as device_inventory

    monkeypatch.setattr(device_inventory, "_scanned", lambda: (2, ""))
    monkeypatch.setattr(device_inventory, "_torch_cuda", lambda: (0, "torch is built without CUDA"))
    inventory = device_inventory.LocalInventory()
    assert inventory.capabilities(onnxruntime=True, tensorrt=False).cuda_devices == 2
    assert inventory.capabilities(onnxruntime=False, tensorrt=False).cuda_devices == 0


def test_a_passive_groups_instances_are_placed_and_marked_passive() -> None:
    config = _config(
        "onnxruntime",
        '{ name: "a" kind: KIND_CPU count: 1 }, '
        '{ name: "p" kind: KIND_CPU count: 2 passive: true }, '
        '{ name: "g" kind: KIND_GPU count: 1 gpus: [ 1 ] passive: true }',
    )
    plan = plan_devices(config, TWO_GPUS_ORT_GPU)
    assert [(p.group, p.index, p.kind, p.passive) for p in plan.placements] == [
        ("a", 0, "KIND_CPU", False),
        ("p", 0, "KIND_CPU", True),
        ("p", 1, "KIND_CPU", True),
        ("g", 0, "KIND_GPU", True),
    ]
