"""The Triton Python client's own examples pass against `thaw serve`
(tests/conformance/triton_client_examples.py runs them all, beside real Triton; here a few, when
a mirror of triton-inference-server/client is given by `$TRITON_CLIENT_MIRROR`), and the models
they call (tests/fixtures/client_example_models.py) answer as the examples check, with
tritonclient as the client and no mirror needed."""

from __future__ import annotations

import os
import queue
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.conformance.client_example_cases import CASES
from tests.conformance.qa_checkout import git_show
from tests.conformance.triton_client_examples import EXAMPLES_DIR, extract_examples, run_cases
from tests.fixtures.client_example_models import write_repository
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

_MIRROR = os.environ.get("TRITON_CLIENT_MIRROR", "")
# One of each kind: HTTP, a gRPC stream of three interleaved sequences (one with a string
# CORRID), a decoupled model, and the explicit-contents refusal Thaw once worded differently.
_SMALL_SET = (
    "simple_http_infer_client",
    "simple_grpc_sequence_stream_infer_client -d",
    "simple_grpc_custom_repeat",
    "grpc_explicit_int_content_client",
)


@pytest.mark.skipif(
    not _MIRROR or git_show(Path(_MIRROR), "HEAD", EXAMPLES_DIR) is None,
    reason="no $TRITON_CLIENT_MIRROR (a bare git mirror of triton-inference-server/client)",
)
def test_a_small_set_of_the_examples_passes_against_thaw_serve(tmp_path: Path) -> None:
    cases = tuple(case for case in CASES if case.name in _SMALL_SET)
    assert len(cases) == len(_SMALL_SET)
    assert extract_examples(Path(_MIRROR), "HEAD", cases, tmp_path) == []
    results = run_cases(cases, tmp_path, "serve", verbose=False)
    failed = {name: o.detail for name, o in results.items() if o.outcome != "passed"}
    assert failed == {}


@pytest.fixture(scope="module")
def example_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    names = ("simple", "simple_string", "simple_string_dyna_sequence", "repeat_int32")
    repo = write_repository(tmp_path_factory.mktemp("client-examples") / "models", names)
    server = ServeProcess(repo, "--log-level", "warning")
    try:
        server.wait_ready(timeout_s=180)
        yield server
    finally:
        server.stop()


def test_simple_and_simple_string_add_and_subtract(example_server: ServeProcess) -> None:
    client = httpclient.InferenceServerClient(example_server.hostport)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    for model, datatype, cast in (
        ("simple", "INT32", lambda x: x),
        ("simple_string", "BYTES", lambda x: x.astype(np.bytes_).astype(object)),
    ):
        inputs = [httpclient.InferInput(f"INPUT{i}", [1, 16], datatype) for i in (0, 1)]
        inputs[0].set_data_from_numpy(cast(a))
        inputs[1].set_data_from_numpy(cast(b))
        result = client.infer(model, inputs)
        out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
        assert [int(v) for v in out0.reshape(-1)] == list(range(1, 17)), model
        assert [int(v) for v in out1.reshape(-1)] == list(range(-1, 15)), model


def test_the_string_dyna_sequence_sums_and_adds_its_corrid_at_the_end(
    example_server: ServeProcess,
) -> None:
    client = httpclient.InferenceServerClient(example_server.hostport)
    answers = []
    for step, value in enumerate((20, -11, -7, -1)):
        data = np.full((1, 1), value, dtype=np.int32)
        tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(data)
        result = client.infer(
            "simple_string_dyna_sequence", [tensor], sequence_id="1002",
            sequence_start=step == 0, sequence_end=step == 3,
        )  # fmt: skip
        answers.append(int(result.as_numpy("OUTPUT")[0][0]))
    assert answers == [20, 9, 2, 1 + 1002]


def test_repeat_int32_streams_one_response_per_element(example_server: ServeProcess) -> None:
    responses: queue.Queue[object] = queue.Queue()
    client = grpcclient.InferenceServerClient(example_server.grpc_address)
    inputs = [
        grpcclient.InferInput("IN", [3], "INT32"),
        grpcclient.InferInput("DELAY", [3], "UINT32"),
        grpcclient.InferInput("WAIT", [1], "UINT32"),
    ]
    inputs[0].set_data_from_numpy(np.array([100, 101, 102], dtype=np.int32))
    inputs[1].set_data_from_numpy(np.zeros(3, dtype=np.uint32))
    inputs[2].set_data_from_numpy(np.zeros(1, dtype=np.uint32))
    client.start_stream(
        callback=partial(lambda q, result, error: q.put(error or result), responses)
    )
    try:
        client.async_stream_infer("repeat_int32", inputs)
        got = [responses.get(timeout=30) for _ in range(3)]
    finally:
        client.stop_stream()
        client.close()
    assert [int(r.as_numpy("OUT")[0]) for r in got] == [100, 101, 102]  # type: ignore[attr-defined]
    assert [int(r.as_numpy("IDX")[0]) for r in got] == [0, 1, 2]  # type: ignore[attr-defined]
