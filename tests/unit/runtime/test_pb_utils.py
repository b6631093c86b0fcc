"""The in-process triton_python_backend_utils module has the names Triton models use."""

from __future__ import annotations

import json

import numpy as np
import pytest

from runtime import triton_python_backend_utils as pb_utils


@pytest.mark.parametrize(
    "name",
    ["Tensor", "InferenceRequest", "InferenceResponse", "TritonError", "TritonModelException",
     "get_input_tensor_by_name", "get_output_tensor_by_name", "get_input_config_by_name",
     "get_output_config_by_name", "triton_string_to_numpy", "numpy_to_triton_type",
     "triton_to_numpy_type", "serialize_byte_tensor", "deserialize_bytes_tensor", "Logger",
     "ModelConfig", "TRITONSERVER_RESPONSE_COMPLETE_FINAL"],
)  # fmt: skip
def test_module_exports_tritons_names(name: str) -> None:
    assert hasattr(pb_utils, name)


def test_tensor_round_trip_and_dlpack() -> None:
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb_utils.Tensor("X", data)
    assert tensor.name() == "X" and tensor.as_numpy() is data
    assert tensor.triton_dtype() == 11
    back = pb_utils.Tensor.from_dlpack("Y", tensor.to_dlpack())
    np.testing.assert_array_equal(back.as_numpy(), data)
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.Tensor("S", np.array(["unicode"]))


def test_request_accessors_and_lookup() -> None:
    x = pb_utils.Tensor("X", np.zeros(1))
    request = pb_utils.InferenceRequest(
        inputs=[x], request_id="r", correlation_id=5, requested_output_names=["Y"],
        parameters={"a": 1},
    )  # fmt: skip
    assert pb_utils.get_input_tensor_by_name(request, "X") is x
    assert pb_utils.get_input_tensor_by_name(request, "Z") is None
    assert request.request_id() == "r" and request.correlation_id() == 5
    assert json.loads(request.parameters()) == {"a": 1}
    with pytest.raises(pb_utils.TritonModelException, match="BLS"):
        request.exec()


def test_response_and_error_codes() -> None:
    error = pb_utils.TritonError("bad", pb_utils.TritonError.INVALID_ARG)
    response = pb_utils.InferenceResponse(output_tensors=[], error=error)
    assert response.has_error() and response.error().message() == "bad"
    assert response.error().code() == 3
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.InferenceResponse(output_tensors="nope")


def test_string_types_and_byte_tensors() -> None:
    assert pb_utils.triton_string_to_numpy("TYPE_FP16") is np.float16
    assert pb_utils.numpy_to_triton_type(np.object_) == 13
    data = np.array([b"ab", b"", b"xyz"], dtype=np.object_)
    round_trip = pb_utils.deserialize_bytes_tensor(pb_utils.serialize_byte_tensor(data))
    assert round_trip.tolist() == data.tolist()


def test_model_config_helper_for_auto_complete() -> None:
    config = pb_utils.ModelConfig({"name": "m", "max_batch_size": 0})
    config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [4]})
    config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [4]})  # idempotent
    config.set_max_batch_size(8)
    config.set_dynamic_batching()
    assert config.as_dict()["input"] == [{"name": "X", "data_type": "TYPE_FP32", "dims": [4]}]
    assert config.max_batch_size() == 8 and "dynamic_batching" in config.as_dict()
    with pytest.raises(ValueError):
        config.add_output({"name": "Y"})
    with pytest.raises(ValueError):
        config.set_max_batch_size(2)
