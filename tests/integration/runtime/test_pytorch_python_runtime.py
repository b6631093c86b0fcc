"""The PyTorch backend's Python runtime (`backend: "pytorch"` with `runtime: "model.py"`,
Triton's "PyTorch 2.0 backend"): a `torch.nn.Module` in model.py with and without its
state_dict, batched requests split back per request, a TorchScript model.pt, Triton's log
lines for its settings, clear load failures that leave the other models serving, and the
same model through `thaw up`. Real `thaw serve` / `thaw up` processes, `tritonclient.http`."""

from __future__ import annotations

import concurrent.futures
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import write_config
from tests.fixtures.pytorch_runtime_models import (
    make_addsub,
    make_neuralnet,
    make_torchscript,
    reference_module,
)
from tests.fixtures.serve_process import serving
from tests.fixtures.up_process import UpProcess, light_args

pytestmark = pytest.mark.integration

_LIGHT = ("--allow-grpc=false", "--allow-metrics=false")


def _addsub(hostport: str, model: str = "addsub") -> None:
    a, b = (np.random.rand(4).astype(np.float32) for _ in range(2))
    inputs = [httpclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = httpclient.InferenceServerClient(hostport).infer(model, inputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)


def _neuralnet(hostport: str, rows: int, net: torch.nn.Module) -> None:
    x = np.random.rand(rows, 8).astype(np.float32)
    tensor = httpclient.InferInput("INPUT", [rows, 8], "FP32")
    tensor.set_data_from_numpy(x)
    got = httpclient.InferenceServerClient(hostport).infer("neuralnet", [tensor])
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got.as_numpy("OUTPUT"), want, rtol=1e-5, atol=1e-6)


def test_modules_and_torchscript_serve_with_tritons_log_lines(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    make_addsub(repo)
    neuralnet = make_neuralnet(repo, parameters={"NUM_THREADS": "2", "NUM_INTEROP_THREADS": "1"})
    make_torchscript(repo)
    net = reference_module(neuralnet / "1" / "model.py", "NeuralNet")
    net.load_state_dict(torch.load(neuralnet / "1" / "model.pt"))
    scripted = torch.jit.load(str(repo / "scripted" / "1" / "model.pt"))
    with serving(repo, *_LIGHT, "--log-verbose=1") as server:
        _addsub(server.hostport)
        # Requests of 1-3 rows at once: batched together, each answered with its own rows.
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            list(pool.map(lambda k: _neuralnet(server.hostport, 1 + k % 3, net), range(18)))
        x = np.random.rand(3, 4).astype(np.float32)
        tensor = httpclient.InferInput("INPUT__0", [3, 4], "FP32")
        tensor.set_data_from_numpy(x)
        got = httpclient.InferenceServerClient(server.hostport).infer("scripted", [tensor])
        with torch.no_grad():
            want = scripted(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got.as_numpy("OUTPUT__0"), want, rtol=1e-5, atol=1e-6)
        log = server.logs()
    for line in (
        "Torch parallelism settings for 'addsub': NUM_THREADS = 1; NUM_INTEROP_THREADS = 1;",
        "Torch parallelism settings for 'neuralnet': NUM_THREADS = 2; NUM_INTEROP_THREADS = 1;",
        "'torch.compile' optional parameter(s) for 'addsub': {'disable': True}",
        "Model parameter file not found for 'addsub'",
        "Loading 'scripted' as TorchScript",
    ):
        assert line in log, line
    assert "Model parameter file not found for 'neuralnet'" not in log


def test_a_model_that_cannot_load_says_why_and_the_others_serve(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    make_addsub(repo)
    no_module = make_addsub(repo, "no_module")
    (no_module / "1" / "model.py").write_text("import torch\n\nVALUE = 1\n")
    bad_params = make_addsub(repo, "bad_params", compile_parameters='{"model": 1}')
    empty = make_addsub(repo, "empty")
    (empty / "1" / "model.py").unlink()
    bad_json = repo / "bad_json"
    (bad_json / "1").mkdir(parents=True)
    (bad_json / "1" / "model.py").write_text((no_module.parent / "addsub" / "1" / "model.py")
                                             .read_text())  # fmt: skip
    write_config(bad_json, (bad_params / "config.pbtxt").read_text()
                 .replace('"bad_params"', '"bad_json"')
                 .replace('{\\"model\\": 1}', "not json"))  # fmt: skip
    with serving(repo, *_LIGHT, "--exit-on-error=false", "--strict-readiness=false") as server:
        _addsub(server.hostport)
        with urllib.request.urlopen(f"{server.url}/v2/repository/index", data=b"") as answer:
            index = {m["name"]: m for m in __import__("json").loads(answer.read())}
    assert index["addsub"]["state"] == "READY"
    reasons = {name: index[name].get("reason", "") for name in index if name != "addsub"}
    assert "Cannot find a subclass of torch.nn.Module" in reasons["no_module"], reasons
    assert "'model' is not an optional parameter for 'torch.compile'" in reasons["bad_params"]
    assert "TORCH_COMPILE_OPTIONAL_PARAMETERS is not valid JSON" in reasons["bad_json"]
    assert "No model found in" in reasons["empty"], reasons


def test_through_thaw_up_the_model_wakes_and_serves(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    make_addsub(repo)
    up = UpProcess(repo, *light_args(repo))
    try:
        _addsub(up.hostport)
        with pytest.raises(InferenceServerException, match="unknown model"):
            _addsub(up.hostport, "nothing")
    finally:
        up.stop()


@pytest.mark.slow
def test_torch_compile_runs_the_model_when_not_disabled(tmp_path: Path) -> None:
    """The default `torch.compile` (inductor, which builds C++ with the machine's compiler)."""
    repo = tmp_path / "models"
    neuralnet = make_neuralnet(repo, compile_parameters=None)
    net = reference_module(neuralnet / "1" / "model.py", "NeuralNet")
    net.load_state_dict(torch.load(neuralnet / "1" / "model.pt"))
    with serving(repo, *_LIGHT, "--log-verbose=1", timeout_s=300) as server:
        for rows in (1, 3, 8):
            _neuralnet(server.hostport, rows, net)
        assert "'torch.compile' optional parameter(s) for 'neuralnet': {}" in server.logs()
