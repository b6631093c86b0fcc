"""Ensembles (`platform: "ensemble"`) in a real `thaw serve`: data flow, concurrency, errors,
statistics, and the configs Triton refuses at load."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from tests.fixtures import batch_recorder, models, onnx_models
from tests.fixtures.serve_process import ServeProcess
from tests.support.scheduling_client import Later, fp32, infer

pytestmark = pytest.mark.integration


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += " " + " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: -1 {maps} }}'


def _ensemble(
    name: str,
    ins: list[str],
    outs: list[str],
    steps: list[str],
    dims: int = 4,
    extra_outs: str = "",
) -> str:
    io = lambda kind, names: ", ".join(  # noqa: E731
        f'{{ name: "{n}" data_type: TYPE_FP32 dims: [ {dims} ] }}' for n in names
    )
    return f"""
        name: "{name}"
        platform: "ensemble"
        max_batch_size: 8
        input [ {io("input", ins)} ]
        output [ {io("output", outs)}{extra_outs} ]
        ensemble_scheduling {{ step [ {", ".join(steps)} ] }}
    """


# A -> add_sub -> (SUM, DIFF); SUM -> onnx add -> X; DIFF -> onnx add -> Y (fan-out);
# (X, Y) -> add_sub -> OUT (fan-in).
DIAMOND = _ensemble(
    "diamond",
    ["A", "B"],
    ["OUT", "SUM"],
    [
        _step("add_sub", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"}),
        _step("plus_w", {"INPUT0": "SUM"}, {"OUTPUT0": "X"}),
        _step("plus_w", {"INPUT0": "DIFF"}, {"OUTPUT0": "Y"}),
        _step("add_sub", {"INPUT0": "X", "INPUT1": "Y"}, {"OUTPUT0": "OUT"}),
    ],
)
# Two 0.5 s steps that only depend on the input: they must run side by side (each step's
# STARTED/FINISHED times come out as the ensemble's, to compare their order).
_TIMES = "".join(
    f', {{ name: "{n}" data_type: TYPE_FP64 dims: [ 1 ] }}' for n in ("LS", "LF", "RS", "RF")
)
PARALLEL = _ensemble(
    "parallel",
    ["A"],
    ["P", "Q"],
    [
        _step("slow_left", {"INPUT0": "A"}, {"OUTPUT0": "P", "STARTED": "LS", "FINISHED": "LF"}),
        _step("slow_right", {"INPUT0": "A"}, {"OUTPUT0": "Q", "STARTED": "RS", "FINISHED": "RF"}),
    ],
    dims=-1,
    extra_outs=_TIMES,
)
FAILING = _ensemble(
    "failing", ["A"], ["P"], [_step("always_raises", {"INPUT0": "A"}, {"OUTPUT0": "P"})], dims=-1
)
CYCLE = _ensemble(
    "cycle",
    ["A"],
    ["OUT"],
    [
        _step("add_sub", {"INPUT0": "A", "INPUT1": "T2"}, {"OUTPUT0": "T1", "OUTPUT1": "OUT"}),
        _step("plus_w", {"INPUT0": "T1"}, {"OUTPUT0": "T2"}),
    ],
)
MISSING = _ensemble("missing", ["A"], ["P"], [_step("nope", {"IN": "A"}, {"OUT": "P"})])
LOOP_A = _ensemble("loop_a", ["A"], ["P"], [_step("loop_b", {"A": "A"}, {"P": "P"})])
LOOP_B = _ensemble("loop_b", ["A"], ["P"], [_step("loop_a", {"A": "A"}, {"P": "P"})])


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("ensembles")
    models.make_add_sub(repo, "add_sub", max_batch_size=8)
    onnx_models.make_onnx_add(repo, "plus_w")
    batch_recorder.make_batch_recorder(repo, "slow_left", delay_s=0.5, scheduling="")
    batch_recorder.make_batch_recorder(repo, "slow_right", delay_s=0.5, scheduling="")
    models.make_always_raises(repo, "always_raises")
    config = (repo / "always_raises" / "config.pbtxt").read_text()
    (repo / "always_raises" / "config.pbtxt").write_text(
        config.replace('backend: "python"', 'backend: "python"\nmax_batch_size: 8')
    )
    for name, text in [
        ("diamond", DIAMOND),
        ("parallel", PARALLEL),
        ("failing", FAILING),
        ("cycle", CYCLE),
        ("missing", MISSING),
        ("loop_a", LOOP_A),
        ("loop_b", LOOP_B),
    ]:
        models.make_ensemble(repo, name, text)
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServeProcess]:
    # Explicit mode: loading an ensemble loads its composing models, as Triton does.
    args = ["--model-control-mode", "explicit"]
    for name in ("diamond", "parallel", "failing"):
        args += ["--load-model", name]
    proc = ServeProcess(repo, *args)
    try:
        proc.wait_ready()
        yield proc
    finally:
        rc = proc.stop()
    assert rc == 0, proc.logs()


def _client(server: ServeProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.hostport, network_timeout=60)


def test_data_flows_through_fan_out_and_fan_in(server: ServeProcess) -> None:
    client = _client(server)
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.full((2, 4), 3.0, dtype=np.float32)
    inputs = []
    for name, data in (("A", a), ("B", b)):
        tensor = httpclient.InferInput(name, [2, 4], "FP32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    result = client.infer("diamond", inputs)
    plus_w = client.infer("plus_w", [_zeros()]).as_numpy("OUTPUT0")[0]  # W itself
    np.testing.assert_allclose(result.as_numpy("SUM"), a + b)
    np.testing.assert_allclose(result.as_numpy("OUT"), (a + b + plus_w) + (a - b + plus_w))
    # The composing models were loaded with the ensemble, and each step counted in its model.
    stats = {s["name"]: s for s in client.get_inference_statistics()["model_stats"]}
    assert stats["diamond"]["inference_stats"]["success"]["count"] == 1
    assert stats["diamond"]["inference_count"] == 2
    assert stats["add_sub"]["execution_count"] == 2  # steps 1 and 4
    assert stats["plus_w"]["execution_count"] >= 2  # steps 2 and 3 (+ the W probe)
    client.close()


def _diamond_inputs() -> list[httpclient.InferInput]:
    inputs = []
    for name in ("A", "B"):
        tensor = httpclient.InferInput(name, [1, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
        inputs.append(tensor)
    return inputs


def test_only_the_steps_the_requested_outputs_need_run(server: ServeProcess) -> None:
    # Triton prunes the steps no requested output needs (qa/L0_simple_ensemble's
    # test_ensemble_add_sub_one_output): asked for SUM alone, diamond runs step 1 only.
    client = _client(server)
    before = {s["name"]: s for s in client.get_inference_statistics()["model_stats"]}
    sum_only = [httpclient.InferRequestedOutput("SUM")]
    result = client.infer("diamond", _diamond_inputs(), outputs=sum_only)
    np.testing.assert_allclose(result.as_numpy("SUM"), np.full((1, 4), 2.0))
    after = {s["name"]: s for s in client.get_inference_statistics()["model_stats"]}
    assert after["plus_w"]["execution_count"] == before["plus_w"]["execution_count"]
    assert after["add_sub"]["execution_count"] == before["add_sub"]["execution_count"] + 1
    client.close()


def test_an_ensemble_answer_carries_the_requests_sequence_parameters(
    server: ServeProcess,
) -> None:
    # Triton 2.51 (observed): every ensemble response with outputs carries sequence_id (0
    # outside a sequence), sequence_start and sequence_end, over HTTP and gRPC alike.
    client = _client(server)
    result = client.infer("diamond", _diamond_inputs())
    assert result.get_response()["parameters"] == {
        "sequence_id": 0,
        "sequence_start": False,
        "sequence_end": False,
    }
    client.close()


def _zeros() -> httpclient.InferInput:
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 4), dtype=np.float32))
    return tensor


def test_steps_run_as_soon_as_their_inputs_exist(server: ServeProcess) -> None:
    answer = infer(server.url, "parallel", [fp32("A", [1.0, 2.0])])
    assert answer.status == 200, answer.doc
    assert answer.output("P") == answer.output("Q") == [1.0, 2.0]
    # Side by side, not one after the other: each step began before the other ended.
    left, right = (answer.output(s)[0] for s in ("LS", "RS"))
    assert left < answer.output("RF")[0] and right < answer.output("LF")[0]


def test_a_failing_step_fails_the_request_once_with_its_error(server: ServeProcess) -> None:
    answer = infer(server.url, "failing", [fp32("A", [1.0])])
    assert answer.status == 500
    assert answer.error.startswith("in ensemble 'failing', ")
    assert answer.error.count("in ensemble") == 1
    assert "execute_error always fails" in answer.error
    # An input the ensemble does not declare is refused before any step runs.
    wrong = infer(server.url, "failing", [fp32("B", [1.0])])
    assert wrong.status == 400
    # Counted as Triton's core counts an ensemble's failure (qa/L0_model_queue): reason OTHER
    # for the ensemble, the step's own reason (BACKEND) for the step's model.
    metrics = requests.get(server.metrics_url + "/metrics", timeout=30).text
    assert 'nv_inference_request_failure{model="failing",reason="OTHER",version="1"} 1' in metrics
    assert 'nv_inference_request_failure{model="failing",reason="BACKEND",version="1"} 0' in metrics


def test_concurrent_ensemble_requests_all_get_their_own_answers(server: ServeProcess) -> None:
    calls = [
        Later(server.url, "diamond", [fp32("A", [float(i)] * 4), fp32("B", [1.0] * 4)])
        for i in range(6)
    ]
    for i, call in enumerate(calls):
        answer = call.result()
        assert answer.status == 200 and answer.output("SUM") == [i + 1.0] * 4


@pytest.mark.parametrize(
    ("model", "fragment"),
    [
        ("cycle", "its steps form a cycle"),
        ("missing", "depends on 'nope' which is not in the model repository"),
        ("loop_a", "circular dependency between ensembles: loop_a -> ... -> loop_b -> loop_a"),
    ],
)
def test_ensembles_that_cannot_run_fail_to_load_with_a_clear_error(
    server: ServeProcess, model: str, fragment: str
) -> None:
    client = _client(server)
    with pytest.raises(httpclient.InferenceServerException) as raised:
        client.load_model(model)
    assert fragment in str(raised.value)
    rows = {row["name"]: row for row in client.get_model_repository_index()}
    assert rows[model]["state"] == "UNAVAILABLE" and fragment in rows[model]["reason"]
    client.close()
