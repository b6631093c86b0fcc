"""Ensembles and stateful models through a real `thaw up`: an ensemble wakes the models its
steps run (each with its own replicas), and every request of a sequence reaches the replica
that holds it, over REST, gRPC and gRPC streams."""

from __future__ import annotations

import json
import queue
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.fixtures import models, onnx_models, sequence_models
from tests.fixtures.up_process import UpProcess, with_params
from tests.support.scheduling_client import Later, fp32, infer

pytestmark = pytest.mark.integration

PIPELINE = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "add_sub" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "SUM" } },
  { model_name: "plus_w" model_version: -1
    input_map { key: "INPUT0" value: "SUM" } output_map { key: "OUTPUT0" value: "OUT" } }
] }
"""
BROKEN = PIPELINE.replace('"pipeline"', '"broken_pipeline"').replace('"plus_w"', '"nope"')


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("up_scheduling")
    models.make_add_sub(repo, "add_sub", max_batch_size=8)
    onnx_models.make_onnx_add(repo, "plus_w")
    models.make_ensemble(repo, "pipeline", PIPELINE)
    models.make_ensemble(repo, "broken_pipeline", BROKEN)
    stateful = sequence_models.make_sequence_accumulator(repo, "accumulator", instance_count=1)
    with_params(stateful, min_replicas=2, max_replicas=2)
    return repo


@pytest.fixture(scope="module")
def up(repo: Path) -> Iterator[UpProcess]:
    args = ["--warm-pool", "1", "--no-image-build", "--preload-frameworks", "onnxruntime"]
    server = UpProcess(repo, *args)
    yield server
    server.stop()


def test_an_ensemble_at_zero_wakes_the_models_its_steps_run(up: UpProcess) -> None:
    client = httpclient.InferenceServerClient(up.hostport, network_timeout=120)
    a, b = np.full((1, 4), 2.0, np.float32), np.arange(4, dtype=np.float32).reshape(1, 4)
    tensors = []
    for name, data in (("A", a), ("B", b)):
        tensor = httpclient.InferInput(name, [1, 4], "FP32")
        tensor.set_data_from_numpy(data)
        tensors.append(tensor)
    result = client.infer("pipeline", tensors).as_numpy("OUT")
    w = client.infer("plus_w", [_zeros()]).as_numpy("OUTPUT0")
    np.testing.assert_allclose(result, a + b + w, rtol=1e-6)
    # Each step ran on its own model's replica, which the ensemble's request woke.
    for model in ("pipeline", "add_sub", "plus_w"):
        assert up.model(model)["replicas_ready"] >= 1, up.model(model)
    executions = client.get_inference_statistics("add_sub")["model_stats"][0]["execution_count"]
    assert executions >= 1
    client.close()


def _zeros() -> httpclient.InferInput:
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 4), np.float32))
    return tensor


def test_an_ensemble_whose_step_model_is_missing_is_unavailable_with_the_reason(
    up: UpProcess,
) -> None:
    answer = infer(up.url, "broken_pipeline", [fp32("A", [1.0] * 4), fp32("B", [1.0] * 4)])
    assert answer.status == 503
    assert "depends on 'nope' which is not in the model repository" in answer.error


def test_every_request_of_a_sequence_reaches_the_replica_that_holds_it(up: UpProcess) -> None:
    up.wait_for(
        lambda: up.model("accumulator")["replicas_ready"] == 2, 120, "two accumulator replicas"
    )
    values = {seq: [float(seq), 1.0, 2.0, 3.0] for seq in (11, 22, 33, 44)}
    seen: dict[int, set[str]] = {seq: set() for seq in values}
    for step in range(4):
        calls = {
            seq: Later(
                up.url,
                "accumulator",
                [fp32("INPUT", [vals[step]])],
                parameters={
                    "sequence_id": seq,
                    "sequence_start": step == 0,
                    "sequence_end": step == 3,
                },
            )
            for seq, vals in values.items()
        }
        for seq, call in calls.items():
            answer = call.result(120)
            assert answer.status == 200, (answer.doc, up.log())
            # A request that reached the other replica would be refused there (no START) or
            # come back with another sum.
            assert answer.output("SUM") == [sum(values[seq][: step + 1])]
            seen[seq].add(answer.output("INSTANCE")[0])
    assert all(len(instances) == 1 for instances in seen.values())
    # Both replicas served sequences (the balancer spread the starts): the binding mattered.
    counts = []
    for replica in up.model("accumulator")["replicas"]:
        with urllib.request.urlopen(f"{replica['url']}/v2/models/accumulator/stats") as resp:
            counts.append(json.loads(resp.read())["model_stats"][0]["inference_count"])
    assert sorted(counts) != [0, 16] and sum(counts) == 16, counts


def _replica_counts(up: UpProcess) -> dict[str, int]:
    """Each accumulator replica's inference count, by its URL."""
    counts = {}
    for replica in up.model("accumulator")["replicas"]:
        with urllib.request.urlopen(f"{replica['url']}/v2/models/accumulator/stats") as resp:
            counts[replica["url"]] = json.loads(resp.read())["model_stats"][0]["inference_count"]
    return counts


def _grpc_value(value: float) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("INPUT", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.full((1, 1), value, np.float32))
    return tensor


def _sum(result: grpcclient.InferResult) -> float:
    return float(result.as_numpy("SUM").reshape(-1)[0])


def test_every_grpc_request_of_a_sequence_reaches_the_replica_that_holds_it(
    up: UpProcess,
) -> None:
    """ModelInfer over gRPC, as tritonclient.grpc sends a sequence: routed by it, as REST is
    (a request that reached the other replica would be refused there, no START)."""
    up.wait_for(
        lambda: up.model("accumulator")["replicas_ready"] == 2, 120, "two accumulator replicas"
    )
    assert up.grpc_address, up.log()
    before = _replica_counts(up)
    values = {seq: [float(seq), 1.0, 2.0, 3.0] for seq in (61, 62, 63, 64)}
    with grpcclient.InferenceServerClient(up.grpc_address) as client:
        for step in range(4):
            for seq, vals in values.items():
                result = client.infer(
                    "accumulator", [_grpc_value(vals[step])], sequence_id=seq,
                    sequence_start=step == 0, sequence_end=step == 3, client_timeout=120,
                )  # fmt: skip
                assert _sum(result) == sum(vals[: step + 1]), (seq, step)
    after = _replica_counts(up)
    served = sorted(after[url] - before.get(url, 0) for url in after)
    assert sum(served) == 16 and 0 not in served, served  # both held sequences: it mattered


def test_a_grpc_stream_continues_each_sequence_on_the_replica_that_holds_it(
    up: UpProcess,
) -> None:
    """One client stream carrying several sequences, interleaved (as Triton's
    simple_grpc_sequence_stream_infer_client sends them), begun elsewhere on both replicas:
    each message goes to its sequence's replica; a sequence begun on the stream stays on it."""
    up.wait_for(
        lambda: up.model("accumulator")["replicas_ready"] == 2, 120, "two accumulator replicas"
    )
    before = _replica_counts(up)
    begun = (71, 72, 73, 74)
    answers: queue.Queue[tuple[grpcclient.InferResult | None, object]] = queue.Queue()
    with grpcclient.InferenceServerClient(up.grpc_address) as client:
        for seq in begun:  # spread over both replicas by the balancer
            start = client.infer(
                "accumulator", [_grpc_value(float(seq))], sequence_id=seq, sequence_start=True,
                client_timeout=120,
            )  # fmt: skip
            assert _sum(start) == float(seq)
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        expected: dict[str, float] = {}
        for step in (1.0, 2.0):
            for seq in begun:
                request_id = f"{seq}-{step:g}"
                client.async_stream_infer(
                    "accumulator", [_grpc_value(step)], request_id=request_id, sequence_id=seq,
                    sequence_end=step == 2.0,
                )  # fmt: skip
                expected[request_id] = seq + (1.0 if step == 1.0 else 3.0)
        for step, flags in ((5.0, {"sequence_start": True}), (6.0, {"sequence_end": True})):
            client.async_stream_infer(
                "accumulator", [_grpc_value(step)], request_id=f"75-{step:g}", sequence_id=75,
                **flags,
            )  # fmt: skip
        expected["75-5"], expected["75-6"] = 5.0, 11.0
        got: dict[str, float] = {}
        for _ in expected:
            result, error = answers.get(timeout=120)
            assert error is None and result is not None, error
            got[result.get_response().id] = _sum(result)
        # The client stream needs both replicas and has one replica stream to each, holding
        # one slot there (sequence 75, begun on it, went on its first; not a third stream).
        held = sorted(replica["in_flight"] for replica in up.model("accumulator")["replicas"])
        assert held == [1, 1], held
        client.stop_stream()
    assert got == expected
    after = _replica_counts(up)
    served = sorted(after[url] - before.get(url, 0) for url in after)
    assert sum(served) == 14 and 0 not in served, served
