"""A TorchScript model's string I/O in a real `thaw serve`, over HTTP and gRPC with tritonclient:
BYTES in as `List[str]`, `List[str]` back as BYTES (Triton's libtorch backend), bytes that are
not UTF-8 refused per request with the server serving on, and Triton's gen_qa implicit-state
model whose running sum is a string state (qa/L0_implicit_state's
`libtorch_nobatch_sequence_object`, refused per request before: "BYTES tensors are not
supported by torch models")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.serve_process import ServeProcess
from tests.fixtures.torch_string_models import make_torch_string_sequence, make_torch_string_shout

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("torch_strings")
    make_torch_string_shout(repo)
    make_torch_string_sequence(repo)
    process = ServeProcess(repo)
    try:
        process.wait_ready(timeout_s=60)
        yield process
    finally:
        process.stop()


@pytest.fixture(params=["http", "grpc"])
def protocol(request: pytest.FixtureRequest, server: ServeProcess) -> Iterator[tuple[Any, Any]]:
    """(client module, client) of one protocol."""
    if request.param == "http":
        client: Any = httpclient.InferenceServerClient(server.hostport)
        yield httpclient, client
    else:
        client = grpcclient.InferenceServerClient(server.grpc_address)
        yield grpcclient, client
    client.close()


def _text(module: Any, *items: bytes) -> Any:
    tensor = module.InferInput("INPUT__0", [len(items)], "BYTES")
    tensor.set_data_from_numpy(np.array(items, dtype=np.object_))
    return tensor


def test_strings_round_trip_through_a_torchscript_model(protocol: tuple[Any, Any]) -> None:
    module, client = protocol
    result = client.infer("torch_string_shout", [_text(module, "naïve".encode(), b"", b"a b")])
    assert result.as_numpy("OUTPUT__0").tolist() == ["NAïVE".encode(), b"", b"A B"]
    assert result.as_numpy("OUTPUT__1").tolist() == [6, 0, 3]  # UTF-8 bytes in TorchScript
    output = result.get_output("OUTPUT__0")
    datatype = output["datatype"] if module is httpclient else output.datatype
    assert datatype == "BYTES"


def test_bytes_that_are_not_utf8_are_refused_and_the_model_serves_on(
    protocol: tuple[Any, Any],
) -> None:
    module, client = protocol
    with pytest.raises(InferenceServerException) as caught:
        client.infer("torch_string_shout", [_text(module, b"ok", b"\xc3\x28")])
    assert "input 'INPUT__0' element 1 is not UTF-8 text" in caught.value.message()
    expected = "400" if module is httpclient else "StatusCode.INVALID_ARGUMENT"
    assert caught.value.status() == expected
    result = client.infer("torch_string_shout", [_text(module, b"still")])
    assert result.as_numpy("OUTPUT__0").tolist() == [b"STILL"]


def test_a_string_state_keeps_a_sequences_running_sum(protocol: tuple[Any, Any]) -> None:
    module, client = protocol
    sequence_id = 41 if module is httpclient else 42
    sums = []
    for index, value in enumerate([b"3", b"4", b"10"]):
        result = client.infer(
            "torch_string_sequence",
            [_text(module, value)],
            sequence_id=sequence_id,
            sequence_start=index == 0,
            sequence_end=index == 2,
        )
        sums.append(result.as_numpy("OUTPUT__0").tolist())
    assert sums == [[b"3"], [b"7"], [b"17"]]
