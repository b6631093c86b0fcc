"""The device check's inputs, made locally: weight images of N GB, models with random weights.

- `weights_image`: a safetensors file of fp16 tensors (64 MiB each, every one distinct so
  content addressing cannot fold them) built into an image in a directory store, then deleted;
- `torchscript_mlp`: a TorchScript stack of Linear+ReLU layers of about N GB, with a KIND_GPU
  `config.pbtxt` (the cold-start model);
- `onnx_mlp`: the same shape as ONNX (MatMul, Add, Relu), optionally with Triton's `tensorrt`
  accelerator in its config;
- `tensorrt_plan`: a plan built from such an ONNX file with TensorRT's builder.

Each maker skips work a previous run in the same `--work` directory already did.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["onnx_mlp", "tensorrt_plan", "torchscript_mlp", "weights_image"]

TENSOR_BYTES = 64 << 20


def weights_image(cache: Path, work: Path, name: str, gib: float, *, target: str) -> None:
    """An image `name:1` of `gib` GiB of fp16 weights in the directory store `cache`."""
    from snapshotter import build_image
    from snapshotter.stores.dir_store import DirStore

    marker = work / f"{name}.built"
    if marker.exists():
        return
    version = work / "repo" / name / "1"
    version.mkdir(parents=True, exist_ok=True)
    count = max(1, int(gib * (1 << 30)) // TENSOR_BYTES)
    elements = TENSOR_BYTES // 2
    header: dict[str, Any] = {
        f"layer{i}.weight": {
            "dtype": "F16",
            "shape": [elements // 4096, 4096],
            "data_offsets": [i * TENSOR_BYTES, (i + 1) * TENSOR_BYTES],
        }
        for i in range(count)
    }
    head = json.dumps(header).encode()
    block = np.random.default_rng(0).integers(0, 1 << 16, elements, dtype=np.uint16)
    with (version / "model.safetensors").open("wb") as f:
        f.write(len(head).to_bytes(8, "little") + head)
        for i in range(count):
            block[:4] = np.frombuffer(i.to_bytes(8, "little"), dtype=np.uint16)  # distinct
            f.write(block.tobytes())
    build_image(version, DirStore(cache), target=target, max_chunk_bytes=256 << 20,
                hash_threads=max(2, (os.cpu_count() or 2) // 2))  # fmt: skip
    (version / "model.safetensors").unlink()  # only the image is needed from here on
    marker.touch()


def torchscript_mlp(repo: Path, name: str, gib: float, *, width: int = 8192) -> Path:
    """A TorchScript MLP of about `gib` GiB (fp32), KIND_GPU; input INPUT__0 [width]."""
    import torch

    model_dir = repo / name
    path = model_dir / "1" / "model.pt"
    if not path.exists():
        layers = max(1, round(gib * (1 << 30) / (width * width * 4)))
        torch.manual_seed(0)
        stack = []
        for _ in range(layers):
            linear = torch.nn.Linear(width, width)
            with torch.no_grad():
                linear.weight.normal_(0.0, 1.0 / width**0.5)
                linear.bias.normal_(0.0, 0.01)
            stack += [linear, torch.nn.ReLU()]
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.jit.script(torch.nn.Sequential(*stack)).save(str(path))
    (model_dir / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "pytorch_libtorch"\nmax_batch_size: 8\n'
        f'input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
        f'output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
        "instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]\n"
    )
    return model_dir


def onnx_mlp(
    repo: Path, name: str, *, layers: int = 8, width: int = 2048, tensorrt: bool = False
) -> Path:
    """An ONNX MLP (MatMul + Add + Relu per layer), KIND_GPU; input INPUT0 [width]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model_dir = repo / name
    path = model_dir / "1" / "model.onnx"
    if not path.exists():
        rng = np.random.default_rng(1)
        nodes, inits, last = [], [], "INPUT0"
        for i in range(layers):
            w = (rng.standard_normal((width, width)) / width**0.5).astype(np.float32)
            b = (rng.standard_normal(width) * 0.01).astype(np.float32)
            inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
            out = "OUTPUT0" if i == layers - 1 else f"h{i}"
            nodes += [
                helper.make_node("MatMul", [last, f"w{i}"], [f"m{i}"]),
                helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                helper.make_node("Relu", [f"a{i}"], [out]),
            ]
            last = out
        graph = helper.make_graph(
            nodes, name, [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["N", width])],
            [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["N", width])], inits,
        )  # fmt: skip
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(path))
    accelerator = (
        "optimization { execution_accelerators { gpu_execution_accelerator : [ {\n"
        '  name : "tensorrt"\n'
        f'  parameters {{ key: "trt_profile_min_shapes" value: "INPUT0:1x{width}" }}\n'
        f'  parameters {{ key: "trt_profile_opt_shapes" value: "INPUT0:1x{width}" }}\n'
        f'  parameters {{ key: "trt_profile_max_shapes" value: "INPUT0:8x{width}" }}\n'
        "} ] } }\n"
        if tensorrt
        else ""
    )
    (model_dir / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
        "instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]\n" + accelerator
    )
    return model_dir


def tensorrt_plan(onnx_file: Path, repo: Path, name: str, *, width: int = 2048) -> Path:
    """A `tensorrt_plan` model built from `onnx_file` with TensorRT's builder (batch 1-8)."""
    import tensorrt as trt

    model_dir = repo / name
    path = model_dir / "1" / "model.plan"
    if not path.exists():
        logger = trt.Logger(trt.Logger.WARNING)
        builder = trt.Builder(logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse(onnx_file.read_bytes()):
            raise RuntimeError(f"TensorRT cannot parse {onnx_file}: {parser.get_error(0)}")
        config = builder.create_builder_config()
        profile = builder.create_optimization_profile()
        profile.set_shape("INPUT0", (1, width), (1, width), (8, width))
        config.add_optimization_profile(profile)
        plan = builder.build_serialized_network(network, config)
        if plan is None:
            raise RuntimeError("TensorRT built no engine")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes(plan))
    (model_dir / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "tensorrt_plan"\nmax_batch_size: 8\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {width} ] }} ]\n'
        "instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]\n"
    )
    return model_dir
