"""The benchmark's models and requests: a tiny Python-backend `add_sub` and the example resnet50."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError

from benchmarks.load_client import GrpcPayload, Payload

__all__ = ["Workload", "add_sub_workload", "resnet50_workload", "write_add_sub"]

# What tritonclient sends: no Accept-Encoding, so no server spends time compressing answers.
_COMMON_HEADERS = {"Accept-Encoding": "identity"}

ADD_SUB_ELEMENTS = 16

ADD_SUB_CONFIG = f"""name: "add_sub"
backend: "python"
max_batch_size: 0
input [
  {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {ADD_SUB_ELEMENTS} ] }},
  {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ {ADD_SUB_ELEMENTS} ] }}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {ADD_SUB_ELEMENTS} ] }},
  {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ {ADD_SUB_ELEMENTS} ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""

# Triton's python_backend `add_sub` example, trimmed: OUTPUT0 = IN0 + IN1, OUTPUT1 = IN0 - IN1.
ADD_SUB_MODEL = """import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        out0 = pb_utils.get_output_config_by_name(config, "OUTPUT0")
        out1 = pb_utils.get_output_config_by_name(config, "OUTPUT1")
        self.out0_dtype = pb_utils.triton_string_to_numpy(out0["data_type"])
        self.out1_dtype = pb_utils.triton_string_to_numpy(out1["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out0 = pb_utils.Tensor("OUTPUT0", (in0 + in1).astype(self.out0_dtype))
            out1 = pb_utils.Tensor("OUTPUT1", (in0 - in1).astype(self.out1_dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out0, out1]))
        return responses

    def finalize(self):
        pass
"""


@dataclass(frozen=True)
class Workload:
    """A model, the request every client sends it, and a check of the first answer; `grpc`
    and `grpc_check` are the same request as a `ModelInferRequest` (raw_input_contents, as
    tritonclient.grpc sends) and the check of a serialized `ModelInferResponse`."""

    model: str
    kind: str  # the backend a peer needs: "python" or "onnxruntime"
    payload: Payload
    check: Callable[[bytes], str | None]  # None when the answer is right, else why not
    grpc: GrpcPayload | None = None
    grpc_check: Callable[[bytes], str | None] | None = None
    binary: Payload | None = None  # the same request in the binary tensor extension (HTTP)
    binary_check: Callable[[bytes], str | None] | None = None


def _grpc_request(model: str, tensors: list[tuple[str, np.ndarray]]) -> GrpcPayload:
    from tritonclient.grpc import service_pb2

    message = service_pb2.ModelInferRequest(model_name=model)
    for name, array in tensors:
        message.inputs.add(name=name, datatype="FP32", shape=list(array.shape))
        message.raw_input_contents.append(array.tobytes())
    return GrpcPayload(message.SerializeToString())


def _grpc_outputs(answer: bytes) -> dict[str, np.ndarray]:
    from tritonclient.grpc import service_pb2

    response = service_pb2.ModelInferResponse.FromString(answer)
    return {
        out.name: np.frombuffer(raw, dtype=np.float32).reshape(list(out.shape))
        for out, raw in zip(response.outputs, response.raw_output_contents, strict=True)
    }


def write_add_sub(repo: Path) -> None:
    """`repo/add_sub` as a Triton python_backend model."""
    (repo / "add_sub" / "1").mkdir(parents=True, exist_ok=True)
    (repo / "add_sub" / "config.pbtxt").write_text(ADD_SUB_CONFIG)
    (repo / "add_sub" / "1" / "model.py").write_text(ADD_SUB_MODEL)


def _outputs(body: bytes) -> dict[str, np.ndarray]:
    doc = json.loads(body)
    return {
        o["name"]: np.asarray(o["data"], dtype=np.float32).reshape(o["shape"])
        for o in doc["outputs"]
    }


def add_sub_workload() -> Workload:
    """JSON request with two FP32 [16] tensors, as the issue's Python-backend comparison uses."""
    rng = np.random.default_rng(7)
    a, b = (rng.standard_normal(ADD_SUB_ELEMENTS).astype(np.float32) for _ in range(2))
    tensors = [("INPUT0", a), ("INPUT1", b)]
    doc = {
        "inputs": [
            {"name": n, "shape": [ADD_SUB_ELEMENTS], "datatype": "FP32", "data": t.tolist()}
            for n, t in tensors
        ]
    }
    headers = {"Content-Type": "application/json", **_COMMON_HEADERS}
    payload = Payload("/v2/models/add_sub/infer", json.dumps(doc).encode(), headers)

    def outputs_right(out: dict[str, np.ndarray]) -> str | None:
        ok = np.allclose(out["OUTPUT0"], a + b) and np.allclose(out["OUTPUT1"], a - b)
        return None if ok else "OUTPUT0/OUTPUT1 are not INPUT0+INPUT1 / INPUT0-INPUT1"

    def check(body: bytes) -> str | None:
        try:
            return outputs_right(_outputs(body))
        except (ValueError, KeyError, TypeError) as exc:
            return f"unreadable answer: {exc}: {body[:200]!r}"

    def grpc_check(answer: bytes) -> str | None:
        try:
            return outputs_right(_grpc_outputs(answer))
        except (ValueError, KeyError, TypeError, DecodeError) as exc:
            return f"unreadable answer: {exc}: {answer[:200]!r}"

    grpc = _grpc_request("add_sub", tensors)
    binary = _binary_request("add_sub", tensors, ["OUTPUT0", "OUTPUT1"])

    def binary_check(body: bytes) -> str | None:
        try:
            return outputs_right(_binary_outputs(body))
        except (ValueError, KeyError, TypeError) as exc:
            return f"unreadable answer: {exc}: {body[:200]!r}"

    return Workload("add_sub", "python", payload, check, grpc, grpc_check, binary, binary_check)


def _binary_request(
    model: str, tensors: list[tuple[str, np.ndarray]], outputs: list[str]
) -> Payload:
    """Inputs and outputs in Triton's binary tensor extension, as tritonclient.http sends
    them with `binary_data=True`."""
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "shape": list(array.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": array.nbytes},
                }
                for name, array in tensors
            ],
            "outputs": [{"name": name, "parameters": {"binary_data": True}} for name in outputs],
        }
    ).encode()
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
        **_COMMON_HEADERS,
    }
    body = header + b"".join(array.tobytes() for _, array in tensors)
    return Payload(f"/v2/models/{model}/infer", body, headers)


def _binary_outputs(body: bytes) -> dict[str, np.ndarray]:
    """FP32 outputs of an answer in the binary tensor extension (its JSON header, then each
    output's bytes in order; the header's end is where its JSON ends)."""
    doc, at = json.JSONDecoder().raw_decode(body.decode("latin-1"))
    out = {}
    for o in doc["outputs"]:
        size = int(o["parameters"]["binary_data_size"])
        out[o["name"]] = np.frombuffer(body[at : at + size], dtype=np.float32).reshape(o["shape"])
        at += size
    if at != len(body):
        raise ValueError(f"{len(body) - at} bytes after the last output")
    return out


def resnet50_workload(model_file: Path) -> Workload:
    """One 3x224x224 image in Triton's binary tensor extension, logits back as JSON.

    The expected logits come from onnxruntime on the same `model.onnx`, so a server that answers
    fast but wrong is caught.
    """
    import onnxruntime as ort

    image = np.random.default_rng(3).standard_normal((1, 3, 224, 224)).astype(np.float32)
    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    [expected] = session.run(["output"], {"input": image})
    raw = image.tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": [1, 3, 224, 224],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
            "outputs": [{"name": "output", "parameters": {"binary_data": False}}],
        }
    ).encode()
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
        **_COMMON_HEADERS,
    }
    payload = Payload("/v2/models/resnet50/infer", header + raw, headers)

    def logits_right(logits: np.ndarray) -> str | None:
        close = np.allclose(logits.reshape(expected.shape), expected, atol=1e-3, rtol=1e-3)
        return None if close else "logits differ from onnxruntime's on the same model.onnx"

    def check(body: bytes) -> str | None:
        try:
            return logits_right(_outputs(body)["output"])
        except (ValueError, KeyError, TypeError) as exc:
            return f"unreadable answer: {exc}: {body[:200]!r}"

    def grpc_check(answer: bytes) -> str | None:
        try:
            return logits_right(_grpc_outputs(answer)["output"])
        except (ValueError, KeyError, TypeError, DecodeError) as exc:
            return f"unreadable answer: {exc}: {answer[:200]!r}"

    grpc = _grpc_request("resnet50", [("input", image)])
    return Workload("resnet50", "onnxruntime", payload, check, grpc, grpc_check)
