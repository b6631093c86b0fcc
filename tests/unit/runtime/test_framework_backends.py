"""onnxruntime, torch and tensorrt backends through the manager: outputs, naming, errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from runtime.backends.torch_backend import positions
from runtime.config import ModelControlMode, ServeConfig
from runtime.errors import ServingError
from runtime.inference import InferRequest, InferTensor, RequestedOutput
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from tests.fixtures.models import write_config
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.torch_models import (
    make_torch_export_add,
    make_torchscript_add,
    make_torchscript_linear,
)
from tritonconfig.ort_session_options import intra_op_threads


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    make_onnx_add(root)
    make_torchscript_add(root)
    make_torch_export_add(root)
    make_torchscript_linear(root)
    plan_dir = root / "trt" / "1"
    plan_dir.mkdir(parents=True)
    (plan_dir / "model.plan").write_bytes(b"not an engine")
    write_config(
        root / "trt",
        """
        platform: "tensorrt_plan"
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
        """,
    )
    return root


@pytest.fixture
async def manager(repo: Path) -> AsyncIterator[ModelManager]:
    mgr = ModelManager(ServeConfig(repository=repo), metrics=Metrics())
    await mgr.start()
    yield mgr
    await mgr.stop()


def _t(name: str, array: np.ndarray) -> InferTensor:
    return InferTensor(name, "FP32", array.shape, array)


async def test_onnx_add_matches_numpy(manager: ModelManager, repo: Path) -> None:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(repo / "onnx_add" / "1" / "model.onnx"))
    weight = numpy_helper.to_array(model.graph.initializer[0])
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    response = await manager.infer(InferRequest("onnx_add", "", [_t("INPUT0", x)]))
    np.testing.assert_allclose(response.outputs[0].data, x + weight, rtol=1e-6)
    assert response.outputs[0].shape == (3, 4)


@pytest.mark.parametrize("model", ["torch_add_sub", "torch_export_add_sub"])
async def test_torch_models_follow_tritons_naming(manager: ModelManager, model: str) -> None:
    a = np.array([1, 2, 3, 4], dtype=np.float32)
    b = np.array([4, 3, 2, 1], dtype=np.float32)
    request = InferRequest(model, "", [_t("INPUT__1", b), _t("INPUT__0", a)])
    response = await manager.infer(request)
    outputs = {o.name: o.data.tolist() for o in response.outputs}
    assert outputs == {"OUTPUT__0": [5, 5, 5, 5], "OUTPUT__1": [-3, -1, 1, 3]}
    only = InferRequest(model, "", [_t("INPUT__0", a), _t("INPUT__1", b)],
                        [RequestedOutput("OUTPUT__1")])  # fmt: skip
    assert [o.name for o in (await manager.infer(only)).outputs] == ["OUTPUT__1"]


async def test_torchscript_linear_matches_eager(manager: ModelManager, repo: Path) -> None:
    import torch

    module = torch.jit.load(str(repo / "torch_linear" / "1" / "model.pt"))
    x = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    response = await manager.infer(InferRequest("torch_linear", "", [_t("INPUT__0", x)]))
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(response.outputs[0].data, expected, rtol=1e-5)


async def test_tensorrt_without_tensorrt_or_cuda_is_a_clear_reason(manager: ModelManager) -> None:
    row = next(r for r in await manager.index() if r["name"] == "trt")
    assert row["state"] == "UNAVAILABLE"
    assert "tensorrt" in row["reason"].lower() or "cuda" in row["reason"].lower()
    assert manager.model_ready("onnx_add", None)  # others unaffected


def test_torch_input_positions() -> None:
    assert positions(["INPUT__1", "INPUT__0"], ["x", "y"]) == {"INPUT__1": 1, "INPUT__0": 0}
    assert positions(["y", "x"], ["x", "y"]) == {"y": 1, "x": 0}
    assert positions(["a", "b"], ["x", "y"]) == {"a": 0, "b": 1}


def test_intra_op_threads() -> None:
    assert intra_op_threads(3, 2) == 3
    assert intra_op_threads(0, 2) == 0  # onnxruntime's own choice, as in Triton
    assert intra_op_threads(None, 1) >= 1


async def test_corrupt_onnx_file_makes_only_that_model_unavailable(tmp_path: Path) -> None:
    make_onnx_add(tmp_path, "good")
    bad = make_onnx_add(tmp_path, "bad")
    (bad / "1" / "model.onnx").write_bytes(b"\x08\x01garbage" * 10)
    config = ServeConfig(repository=tmp_path, model_control_mode=ModelControlMode.NONE)
    manager = ModelManager(config, metrics=Metrics())
    await manager.start()
    try:
        rows = {r["name"]: r for r in await manager.index()}
        assert rows["good"]["state"] == "READY"
        assert rows["bad"]["state"] == "UNAVAILABLE" and "onnxruntime" in rows["bad"]["reason"]
    finally:
        await manager.stop()


def _widen_add(path: Path) -> None:
    """make_onnx_add's graph with its input's width symbolic."""
    import onnx

    model = onnx.load(str(path))
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "n"
    onnx.save(model, str(path))


async def test_onnx_runtime_error_fails_only_that_request(tmp_path: Path) -> None:
    # Config and graph both take INPUT0 [-1, -1], but the graph adds a weight of 4:
    # onnxruntime raises inside run() for any other width. (A config of [-1] over the graph's
    # fixed 4 is refused at load, as Triton refuses it.)
    model_dir = make_onnx_add(tmp_path, "liar")
    text = (model_dir / "config.pbtxt").read_text().replace("dims: [ 4 ]", "dims: [ -1 ]", 1)
    (model_dir / "config.pbtxt").write_text(text)
    _widen_add(model_dir / "1" / "model.onnx")
    manager = ModelManager(ServeConfig(repository=tmp_path), metrics=Metrics())
    await manager.start()
    try:
        with pytest.raises(ServingError) as info:
            await manager.infer(
                InferRequest("liar", "", [_t("INPUT0", np.zeros((1, 3), np.float32))])
            )
        assert info.value.status == 500
        ok = await manager.infer(
            InferRequest("liar", "", [_t("INPUT0", np.zeros((1, 4), np.float32))])
        )
        assert ok.outputs[0].shape == (1, 4)
    finally:
        await manager.stop()


@pytest.mark.gpu
async def test_onnx_on_gpu_instance(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    model_dir = make_onnx_add(tmp_path, "gpu_add")
    with (model_dir / "config.pbtxt").open("a") as f:
        f.write("instance_group [ { kind: KIND_GPU count: 1 } ]\n")
    manager = ModelManager(ServeConfig(repository=tmp_path, target="cuda"), metrics=Metrics())
    await manager.start()
    try:
        x = np.ones((2, 4), np.float32)
        response = await manager.infer(InferRequest("gpu_add", "", [_t("INPUT0", x)]))
        assert response.outputs[0].shape == (2, 4)
    finally:
        await manager.stop()


def _cuda_or_skip() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")


@pytest.mark.gpu
async def test_tensorrt_plan_matches_onnx(tmp_path: Path) -> None:
    _cuda_or_skip()
    trt = pytest.importorskip("tensorrt")
    onnx_dir = make_onnx_add(tmp_path, "src")
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse((onnx_dir / "1" / "model.onnx").read_bytes())
    build_config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    profile.set_shape("INPUT0", (1, 4), (4, 4), (8, 4))
    build_config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, build_config)
    (tmp_path / "plan" / "1").mkdir(parents=True)
    (tmp_path / "plan" / "1" / "model.plan").write_bytes(bytes(plan))
    write_config(
        tmp_path / "plan",
        """
        platform: "tensorrt_plan"
        max_batch_size: 8
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
        instance_group [ { kind: KIND_GPU count: 1 } ]
        """,
    )
    manager = ModelManager(ServeConfig(repository=tmp_path, target="cuda"), metrics=Metrics())
    await manager.start()
    try:
        x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
        expected = await manager.infer(InferRequest("src", "", [_t("INPUT0", x)]))
        got = await manager.infer(InferRequest("plan", "", [_t("INPUT0", x)]))
        np.testing.assert_allclose(got.outputs[0].data, expected.outputs[0].data, rtol=1e-5)
    finally:
        await manager.stop()


@pytest.mark.gpu
async def test_torchscript_on_gpu_instance(tmp_path: Path) -> None:
    _cuda_or_skip()
    model_dir = make_torchscript_linear(tmp_path, "gpu_linear")
    with (model_dir / "config.pbtxt").open("a") as f:
        f.write("instance_group [ { kind: KIND_GPU count: 1 } ]\n")
    manager = ModelManager(ServeConfig(repository=tmp_path, target="cuda"), metrics=Metrics())
    await manager.start()
    try:
        x = np.ones((2, 8), np.float32)
        response = await manager.infer(InferRequest("gpu_linear", "", [_t("INPUT__0", x)]))
        assert response.outputs[0].shape == (2, 8)
    finally:
        await manager.stop()


async def test_onnx_string_tensors_round_trip_as_bytes(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("TEXT", TensorProto.STRING, [-1])
    y = helper.make_tensor_value_info("ECHO", TensorProto.STRING, [-1])
    graph = helper.make_graph([helper.make_node("Identity", ["TEXT"], ["ECHO"])], "s", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (tmp_path / "strings" / "1").mkdir(parents=True)
    onnx.save(model, str(tmp_path / "strings" / "1" / "model.onnx"))
    manager = ModelManager(ServeConfig(repository=tmp_path), metrics=Metrics())
    await manager.start()
    try:
        assert manager.config("strings", None)["input"][0]["data_type"] == "TYPE_STRING"
        data = np.array([b"caf\xc3\xa9", b"", b"x y"], dtype=np.object_)
        request = InferRequest("strings", "", [InferTensor("TEXT", "BYTES", (3,), data)])
        response = await manager.infer(request)
        assert response.outputs[0].datatype == "BYTES"
        assert response.outputs[0].data.tolist() == data.tolist()
    finally:
        await manager.stop()


# -- a dynamic batch is one framework call -----------------------------------------------------


class _CountingCalls:
    """Wraps a session (its `run`) or a module (a call); records each call's batch size."""

    def __init__(self, inner: object) -> None:
        self._inner = inner
        self.batches: list[int] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def __call__(self, *args: object) -> object:  # torch modules are called
        self.batches.append(int(args[0].shape[0]))  # type: ignore[attr-defined]
        return self._inner(*args)  # type: ignore[operator]

    def run(self, names: object, feed: dict) -> object:  # type: ignore[type-arg]
        self.batches.append(int(next(iter(feed.values())).shape[0]))
        return self._inner.run(names, feed)  # type: ignore[attr-defined]


def _load(backend_class: type, repo: Path, name: str, platform_file: str) -> object:
    from runtime.backends.base import LoadContext
    from runtime.model_config import complete_config, parse_config

    model_dir = repo / name
    config = parse_config((model_dir / "config.pbtxt").read_text(), name)
    complete_config(config, model_dir, name, gpu_available=False, require_model_files=True)
    backend = backend_class()
    backend.load(
        LoadContext(
            model_name=name,
            version="1",
            version_dir=model_dir / "1",
            model_dir=model_dir,
            config=config,
            instance_kind="KIND_CPU",
            device_id=0,
            model_file=model_dir / "1" / platform_file,
        )
    )
    return backend


@pytest.mark.parametrize(
    ("model", "input_name", "file"),
    [("onnx_add", "INPUT0", "model.onnx"), ("torch_linear", "INPUT__0", "model.pt")],
)
def test_a_batch_of_requests_is_one_framework_call_split_back_per_request(
    repo: Path, model: str, input_name: str, file: str
) -> None:
    from runtime.backends.onnxruntime_backend import OnnxRuntimeBackend
    from runtime.backends.torch_backend import TorchBackend

    onnx = model == "onnx_add"
    backend: object = _load(OnnxRuntimeBackend if onnx else TorchBackend, repo, model, file)
    attribute = "_session" if onnx else "_module"
    counting = _CountingCalls(getattr(backend, attribute))
    setattr(backend, attribute, counting)
    width = 4 if onnx else 8
    rng = np.random.default_rng(2)
    requests = [
        InferRequest(model, "1", [_t(input_name, rng.random((rows, width), np.float32))], id=str(i))
        for i, rows in enumerate((1, 2, 1))
    ]
    batched = backend.execute(requests)  # type: ignore[attr-defined]
    assert counting.batches == [4]  # one call over all 4 rows
    alone = [backend.execute([r])[0] for r in requests]  # type: ignore[attr-defined]
    assert counting.batches == [4, 1, 2, 1]
    for together, single, request in zip(batched, alone, requests, strict=True):
        assert together.id == request.id
        np.testing.assert_allclose(together.outputs[0].data, single.outputs[0].data, rtol=1e-5)
        assert together.outputs[0].shape == (request.inputs[0].shape[0], width)


async def test_a_torch_config_with_fewer_inputs_than_forward_takes(tmp_path: Path) -> None:
    """Triton's libtorch backend's check, in its words (qa/L0_model_config's
    autofill_noplatform/pytorch/too_few_inputs: a config with outputs and no inputs)."""
    model_dir = make_torchscript_add(tmp_path, "too_few_inputs")
    text = (model_dir / "config.pbtxt").read_text()
    start, end = text.index("\ninput ["), text.index("\noutput [")
    write_config(model_dir, text[:start] + text[end:])
    manager = ModelManager(ServeConfig(repository=tmp_path), metrics=Metrics())
    await manager.start()
    try:
        (row,) = await manager.index()
        assert row["state"] == "UNAVAILABLE"
        assert row["reason"].endswith(
            "unable to load model 'too_few_inputs', configuration expects 0 inputs, "
            "model provides 2"
        ), row["reason"]
    finally:
        await manager.stop()
