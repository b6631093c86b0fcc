"""The benchmark's binary-tensor request says what tritonclient.http would, and its check reads
the answer's outputs where the JSON header says they are."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.workloads import _binary_outputs, add_sub_workload


def _answer(outputs: dict[str, np.ndarray], trailing: bytes = b"") -> bytes:
    header = {
        "model_name": "add_sub",
        "outputs": [
            {
                "name": name,
                "datatype": "FP32",
                "shape": list(array.shape),
                "parameters": {"binary_data_size": array.nbytes},
            }
            for name, array in outputs.items()
        ],
    }
    raw = b"".join(array.tobytes() for array in outputs.values())
    return json.dumps(header).encode() + raw + trailing


def test_the_binary_request_carries_the_inputs_after_its_header() -> None:
    binary = add_sub_workload().binary
    assert binary is not None
    length = int(binary.headers["Inference-Header-Content-Length"])
    header = json.loads(binary.body[:length])
    assert [i["parameters"]["binary_data_size"] for i in header["inputs"]] == [64, 64]
    assert len(binary.body) == length + 128
    assert all(o["parameters"]["binary_data"] for o in header["outputs"])


def test_the_binary_check_accepts_the_right_sums_and_refuses_wrong_ones() -> None:
    workload = add_sub_workload()
    assert workload.binary is not None and workload.binary_check is not None
    length = int(workload.binary.headers["Inference-Header-Content-Length"])
    raw = workload.binary.body[length:]
    a, b = np.frombuffer(raw[:64], np.float32), np.frombuffer(raw[64:], np.float32)
    assert workload.binary_check(_answer({"OUTPUT0": a + b, "OUTPUT1": a - b})) is None
    assert workload.binary_check(_answer({"OUTPUT0": a - b, "OUTPUT1": a + b})) is not None
    assert "unreadable" in (workload.binary_check(b"not json") or "")


def test_bytes_past_the_last_output_are_refused() -> None:
    ones = np.ones(4, np.float32)
    assert _binary_outputs(_answer({"OUTPUT0": ones}))["OUTPUT0"].tolist() == [1.0] * 4
    with pytest.raises(ValueError, match="after the last output"):
        _binary_outputs(_answer({"OUTPUT0": ones}, trailing=b"xx"))
