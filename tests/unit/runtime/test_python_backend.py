"""Triton python_backend models run unchanged: add_sub, initialize args, errors, auto-complete."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from runtime.backends.base import LoadContext
from runtime.config import ModelControlMode, ServeConfig
from runtime.errors import InvalidInput, ServingError
from runtime.inference import InferRequest, InferTensor, RequestedOutput
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from runtime.python.model_io import model_args
from tests.fixtures.models import make_add_sub, make_execute_error, write_config
from tritonconfig.schema import mc


def python_model(repo: Path, name: str, config: str, source: str) -> Path:
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True)
    if config:
        write_config(model_dir, config)
    (model_dir / "1" / "model.py").write_text(textwrap.dedent(source))
    return model_dir


ARGS_ECHO = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.args = args

    def execute(self, requests):
        out = []
        for request in requests:
            payload = dict(self.args)
            payload["request_id"] = request.request_id()
            payload["parameters"] = request.parameters()
            payload["requested"] = sorted(request.requested_output_names())
            payload["model_dir"] = pb_utils.get_model_dir()
            data = np.array([json.dumps(payload).encode()], dtype=np.object_)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", data)]))
        return out

    def finalize(self):
        open(self.args["model_repository"] + "/finalized", "w").write("yes")
"""
ARGS_CONFIG = """
name: "args_echo"
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""
AUTO_COMPLETE = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "X", "data_type": "TYPE_INT32", "dims": [2]})
        auto_complete_model_config.add_output({"name": "Y", "data_type": "TYPE_INT32", "dims": [2]})
        auto_complete_model_config.set_max_batch_size(4)
        return auto_complete_model_config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y",
                pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 2)]) for r in requests]
"""
MISBEHAVING = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        mode = int(requests[0].inputs()[0].as_numpy()[0])
        if mode == 1:
            raise MemoryError()
        if mode == 2:
            return []
        if mode == 3:
            return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([1.0]))],
                    error=pb_utils.TritonError("nope"))]
        if mode == 4:
            answer = pb_utils.InferenceRequest(model_name="nowhere", inputs=[],
                                               requested_output_names=[]).exec()
            raise pb_utils.TritonModelException(answer.error().message())
        if mode == 5:
            raise pb_utils.TritonModelException("model said no")
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([7.0]))])]
"""
MISBEHAVING_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP64 dims: [ 1 ] } ]
"""


@pytest.fixture
async def manager(tmp_path: Path) -> AsyncIterator[ModelManager]:
    make_add_sub(tmp_path)
    make_execute_error(tmp_path)
    python_model(tmp_path, "args_echo", ARGS_CONFIG, ARGS_ECHO)
    python_model(tmp_path, "auto", "", AUTO_COMPLETE)
    python_model(tmp_path, "misbehaving", MISBEHAVING_CONFIG, MISBEHAVING)
    config = ServeConfig(repository=tmp_path, model_control_mode=ModelControlMode.EXPLICIT,
                         load_models=("*",))  # fmt: skip
    mgr = ModelManager(config, metrics=Metrics())
    await mgr.start()
    yield mgr
    await mgr.stop()


def _f32(name: str, values: list[float]) -> InferTensor:
    data = np.array(values, dtype=np.float32)
    return InferTensor(name, "FP32", data.shape, data)


async def test_tritons_add_sub_example_runs_unchanged(manager: ModelManager) -> None:
    a, b = [1.0, 2.0, 3.0, 4.0], [0.5, 0.5, 0.5, 0.5]
    response = await manager.infer(
        InferRequest("add_sub", "", [_f32("INPUT0", a), _f32("INPUT1", b)])
    )
    outputs = {o.name: o.data for o in response.outputs}
    np.testing.assert_allclose(outputs["OUTPUT0"], np.add(a, b))
    np.testing.assert_allclose(outputs["OUTPUT1"], np.subtract(a, b))
    assert response.outputs[0].datatype == "FP32"
    assert response.model_version == "1"


async def test_initialize_gets_tritons_args(manager: ModelManager, tmp_path: Path) -> None:
    request = InferRequest("args_echo", "", [_f32("IN", [1.0])], [RequestedOutput("OUT")],
                           id="abc", parameters={"k": "v"})  # fmt: skip
    response = await manager.infer(request)
    args = json.loads(response.outputs[0].data[0])
    assert args["model_name"] == "args_echo"
    assert args["model_version"] == "1"
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_name"] in ("args_echo_0_0", "args_echo_0_1")
    assert args["model_instance_device_id"] == "0"
    assert args["model_repository"] == str(tmp_path / "args_echo")
    assert json.loads(args["model_config"])["output"][0]["dims"] == [1]
    assert args["request_id"] == "abc"
    assert json.loads(args["parameters"]) == {"k": "v"}
    assert args["requested"] == ["OUT"]
    assert args["model_dir"] == str(tmp_path / "args_echo" / "1")  # Triton's get_model_dir()
    assert response.outputs[0].datatype == "BYTES"


async def test_unload_calls_finalize_on_every_instance(
    manager: ModelManager, tmp_path: Path
) -> None:
    await manager.unload("args_echo")
    assert (tmp_path / "args_echo" / "finalized").read_text() == "yes"
    assert not manager.model_ready("args_echo", None)


async def test_auto_complete_config_fills_the_config(manager: ModelManager) -> None:
    config = manager.config("auto", None)
    assert config["max_batch_size"] == 4
    assert config["input"][0] == config["input"][0] | {"name": "X", "dims": [2]}
    x = np.array([[1, 2]], dtype=np.int32)
    response = await manager.infer(InferRequest("auto", "", [InferTensor("X", "INT32", (1, 2), x)]))
    assert response.outputs[0].data.tolist() == [[2, 4]]


async def test_exception_fails_only_that_request(manager: ModelManager) -> None:
    with pytest.raises(ServingError) as info:
        await manager.infer(InferRequest("execute_error", "", [_f32("INPUT0", [-1.0])]))
    assert info.value.status == 500 and "negative input" in info.value.message
    with pytest.raises(InvalidInput, match="value over 1000"):
        await manager.infer(InferRequest("execute_error", "", [_f32("INPUT0", [5000.0])]))
    ok = await manager.infer(InferRequest("execute_error", "", [_f32("INPUT0", [3.0])]))
    assert ok.outputs[0].data.tolist() == [3.0]
    stats = manager.statistics("execute_error", None)["model_stats"][0]["inference_stats"]
    # As Triton 2.51's python backend counts them: the execute that raised is a failure; the
    # error response the model made is a request it answered (a success, inference counted).
    assert stats["fail"]["count"] == 1 and stats["success"]["count"] == 2


@pytest.mark.parametrize(
    ("mode", "fragment"),
    [
        (1, "MemoryError"),
        (2, "InferenceRequest(s) size is:1, and InferenceResponse(s) size is:0"),
        (3, "nope"),
        (4, "Model 'nowhere' is not ready"),
        (5, "model said no"),
    ],
)
async def test_misbehaving_models_fail_their_request_and_keep_serving(
    manager: ModelManager, mode: int, fragment: str
) -> None:
    with pytest.raises(ServingError) as info:
        await manager.infer(InferRequest("misbehaving", "", [_f32("IN", [float(mode)])]))
    assert info.value.status == 500
    assert fragment in info.value.message or fragment in repr(info.value)
    ok = await manager.infer(InferRequest("misbehaving", "", [_f32("IN", [0.0])]))
    assert ok.outputs[0].data.tolist() == [7.0]


EXITING = """
import sys

class TritonPythonModel:
    def initialize(self, args):
        if args["model_name"] == "exit_init":
            sys.exit(3)

    def execute(self, requests):
        sys.exit(4)
"""
EXIT_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


async def test_sys_exit_in_a_model_never_stops_the_server(tmp_path: Path) -> None:
    python_model(tmp_path, "exit_init", EXIT_CONFIG, EXITING)
    python_model(tmp_path, "exit_execute", EXIT_CONFIG, EXITING)
    python_model(tmp_path, "exit_import", EXIT_CONFIG, "import sys\nsys.exit(5)\n")
    manager = ModelManager(ServeConfig(repository=tmp_path), metrics=Metrics())
    await manager.start()
    try:
        rows = {row["name"]: row for row in await manager.index()}
        assert rows["exit_init"]["state"] == "UNAVAILABLE"
        assert "SystemExit: 3" in rows["exit_init"]["reason"]
        assert rows["exit_import"]["state"] == "UNAVAILABLE"
        assert "SystemExit: 5" in rows["exit_import"]["reason"]
        with pytest.raises(ServingError) as info:
            await manager.infer(InferRequest("exit_execute", "", [_f32("IN", [1.0])]))
        assert info.value.status == 500 and "SystemExit" in info.value.message
        assert manager.model_ready("exit_execute", None)
    finally:
        await manager.stop()


DATACLASS_MODEL = """
from __future__ import annotations

import dataclasses
import pickle

import triton_python_backend_utils as pb_utils


@dataclasses.dataclass
class Scale:
    factor: float


class TritonPythonModel:
    def initialize(self, args):
        self.scale = pickle.loads(pickle.dumps(Scale(3.0)))

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT",
                r.inputs()[0].as_numpy() * self.scale.factor)]) for r in requests]
"""


async def test_model_files_using_dataclasses_and_pickle_work(tmp_path: Path) -> None:
    python_model(tmp_path, "dc", MISBEHAVING_CONFIG.replace("FP64", "FP32"), DATACLASS_MODEL)
    manager = ModelManager(ServeConfig(repository=tmp_path), metrics=Metrics())
    await manager.start()
    try:
        response = await manager.infer(InferRequest("dc", "", [_f32("IN", [2.0])]))
        assert response.outputs[0].data.tolist() == [6.0]
    finally:
        await manager.stop()
    assert not [m for m in sys.modules if m.startswith("_thaw_python_model_")]


@pytest.mark.parametrize(
    ("kind", "word"), [("KIND_CPU", "CPU"), ("KIND_GPU", "GPU"), ("KIND_MODEL", "MODEL")]
)
def test_the_instance_kind_arg_is_tritons_word_for_the_group_kind(
    tmp_path: Path, kind: str, word: str
) -> None:
    """`args["model_instance_kind"]`: a KIND_MODEL group's instance reads MODEL (checked on
    Triton 2.51), not CPU."""
    ctx = LoadContext(
        model_name="m", version="1", version_dir=tmp_path / "1", model_dir=tmp_path,
        config=mc.ModelConfig(name="m"), instance_kind=kind, device_id=0,
    )  # fmt: skip
    assert model_args(ctx)["model_instance_kind"] == word
