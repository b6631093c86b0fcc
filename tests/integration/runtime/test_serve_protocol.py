"""`thaw serve` speaks KServe v2 to tritonclient: every endpoint, datatype and wire format."""

from __future__ import annotations

import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fixtures import models
from tests.fixtures.serve_process import ServeProcess
from tests.support.datatype_samples import SAMPLES
from thawwire.extensions import EXTENSIONS

pytestmark = pytest.mark.integration


def _add_sub_inputs(binary: bool) -> tuple[list[httpclient.InferInput], np.ndarray, np.ndarray]:
    a = np.arange(4, dtype=np.float32)
    b = np.full(4, 0.5, dtype=np.float32)
    inputs = [
        httpclient.InferInput("INPUT0", [4], "FP32"),
        httpclient.InferInput("INPUT1", [4], "FP32"),
    ]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs, a, b


def test_health_and_server_metadata(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "triton"
    assert meta["extensions"] == list(EXTENSIONS)


def test_model_metadata_config_and_readiness(client: httpclient.InferenceServerClient) -> None:
    meta = client.get_model_metadata("add_sub")
    assert meta["name"] == "add_sub"
    assert [i["name"] for i in meta["inputs"]] == ["INPUT0", "INPUT1"]
    assert client.get_model_metadata("add_sub", model_version="1")["versions"] == ["1"]
    config = client.get_model_config("add_onnx")
    assert [i["name"] for i in config["input"]] == ["A", "B"]
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", model_version="1")
    assert not client.is_model_ready("add_sub_spare")


@pytest.mark.parametrize("binary", [False, True])
def test_add_sub_python_model(client: httpclient.InferenceServerClient, binary: bool) -> None:
    inputs, a, b = _add_sub_inputs(binary)
    outputs = [
        httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")
    ]
    result = client.infer("add_sub", inputs, outputs=outputs, request_id="r-42")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response["id"] == "r-42"
    assert response["model_version"] == "1"
    sized = ["binary_data_size" in o.get("parameters", {}) for o in response["outputs"]]
    assert sized == [binary, binary]


def test_requested_outputs_are_the_only_ones_returned(
    client: httpclient.InferenceServerClient,
) -> None:
    inputs, a, b = _add_sub_inputs(False)
    result = client.infer(
        "add_sub", inputs, outputs=[httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)]
    )
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_no_requested_outputs_means_all_outputs_in_binary(
    client: httpclient.InferenceServerClient,
) -> None:
    inputs, a, b = _add_sub_inputs(False)
    result = client.infer("add_sub", inputs)  # tritonclient then sets binary_data_output
    for output in result.get_response()["outputs"]:
        assert output["parameters"]["binary_data_size"] == 16
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


@pytest.mark.parametrize("datatype", list(SAMPLES))
@pytest.mark.parametrize(("binary_in", "binary_out"), [(False, False), (True, True), (True, False)])
def test_every_datatype_round_trips(
    client: httpclient.InferenceServerClient, datatype: str, binary_in: bool, binary_out: bool
) -> None:
    assert datatype in models.IDENTITY_DATATYPES
    sample = SAMPLES[datatype]
    tensor = httpclient.InferInput("INPUT0", list(sample.shape), datatype)
    tensor.set_data_from_numpy(sample, binary_data=binary_in)
    wanted = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out)]
    result = client.infer(f"identity_{datatype.lower()}", [tensor], outputs=wanted)
    out = result.as_numpy("OUTPUT0")
    if datatype == "BYTES":
        assert [bytes(x) if not isinstance(x, str) else x.encode() for x in out] == list(sample)
    else:
        assert out.dtype == sample.dtype
        np.testing.assert_array_equal(out, sample)
    assert result.get_response()["outputs"][0]["datatype"] == datatype


@pytest.mark.parametrize(
    ("request_algo", "response_algo"),
    [("gzip", "gzip"), ("deflate", "deflate"), ("gzip", None), (None, "deflate")],
)
def test_compression_both_ways(
    client: httpclient.InferenceServerClient, request_algo: str | None, response_algo: str | None
) -> None:
    inputs, a, b = _add_sub_inputs(True)
    result = client.infer(
        "add_sub",
        inputs,
        request_compression_algorithm=request_algo,
        response_compression_algorithm=response_algo,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


def test_onnx_and_torchscript_models(client: httpclient.InferenceServerClient) -> None:
    a = np.array([1, 2, 3, 4], dtype=np.float32)
    b = np.array([10, 20, 30, 40], dtype=np.float32)
    inputs = [httpclient.InferInput("A", [4], "FP32"), httpclient.InferInput("B", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b, binary_data=False)
    np.testing.assert_array_equal(client.infer("add_onnx", inputs).as_numpy("C"), a + b)

    x = httpclient.InferInput("INPUT__0", [4], "FP32")
    x.set_data_from_numpy(np.zeros(4, dtype=np.float32))
    ones = client.infer("scale_torch", [x]).as_numpy("OUTPUT__0")
    np.testing.assert_allclose(ones, np.ones(4, dtype=np.float32))  # 0 * w + 1


def test_classification_returns_top_classes(client: httpclient.InferenceServerClient) -> None:
    inputs, _, _ = _add_sub_inputs(True)  # OUTPUT0 = [0.5, 1.5, 2.5, 3.5]
    wanted = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=False, class_count=2)]
    result = client.infer("add_sub", inputs, outputs=wanted)
    top = [x.decode() if isinstance(x, bytes) else x for x in result.as_numpy("OUTPUT0")]
    assert top == ["3.500000:3", "2.500000:2"]


def test_statistics_count_requests(client: httpclient.InferenceServerClient) -> None:
    before = client.get_inference_statistics("add_sub")["model_stats"][0]["inference_count"]
    for _ in range(3):
        client.infer("add_sub", _add_sub_inputs(True)[0])
    stats = client.get_inference_statistics("add_sub", model_version="1")["model_stats"][0]
    assert stats["inference_count"] == before + 3
    assert stats["inference_stats"]["success"]["count"] >= 3
    everything = client.get_inference_statistics()["model_stats"]
    assert {"add_sub", "add_onnx"} <= {s["name"] for s in everything}


def test_metrics_use_triton_names(
    client: httpclient.InferenceServerClient, runtime_server: ServeProcess
) -> None:
    client.infer("add_sub", _add_sub_inputs(True)[0])
    with urllib.request.urlopen(runtime_server.url + "/metrics", timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    for name in ("nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count"):
        assert f'{name}{{model="add_sub",version="1"}}' in text
