# ruff: noqa: E501 - the test models are Python sources in strings, kept readable
"""Triton Python models as Triton runs them: BLS, async execute, decoupled models over generate /
generate_stream, custom metrics, stub processes (crash restarts, parallel instances, shared
memory tensors, EXECUTION_ENV_PATH), with real `thaw serve` processes and tritonclient."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fixtures import models
from tests.fixtures.serve_process import ServeProcess, serving
from tests.support.scheduling_client import metric

pytestmark = pytest.mark.integration

_VECTOR_IO = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

MODELS: dict[str, tuple[str, str]] = {
    # A plain model the BLS callers call.
    "adder": (
        _VECTOR_IO,
        """
        import triton_python_backend_utils as pb_utils
        class TritonPythonModel:
            def execute(self, requests):
                out = []
                for r in requests:
                    a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                    b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
                    out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a + b),
                                                           pb_utils.Tensor("OUTPUT1", a - b)]))
                return out
    """,
    ),
    # BLS, blocking: forwards to the model named in its parameters (errors come back as errors).
    "bls_sync_caller": (
        _VECTOR_IO,
        """
        import json
        import triton_python_backend_utils as pb_utils
        class TritonPythonModel:
            def execute(self, requests):
                out = []
                for r in requests:
                    target = json.loads(r.parameters()).get("target", "adder")
                    call = pb_utils.InferenceRequest(
                        model_name=target, requested_output_names=["OUTPUT0", "OUTPUT1"],
                        inputs=r.inputs(), timeout=5_000_000,
                        preferred_memory=pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0))
                    answer = call.exec()
                    if answer.has_error():
                        out.append(pb_utils.InferenceResponse(error=answer.error()))
                    else:
                        out.append(pb_utils.InferenceResponse(answer.output_tensors()))
                return out
    """,
    ),
    # async execute + async_exec, to a plain model and (decoupled=True) to a decoupled one.
    "bls_async_caller": (
        """
        input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] },
                 { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
    """,
        """
        import asyncio
        import numpy as np
        import triton_python_backend_utils as pb_utils
        class TritonPythonModel:
            async def execute(self, requests):
                out = []
                for r in requests:
                    n = pb_utils.get_input_tensor_by_name(r, "IN")
                    calls = [pb_utils.InferenceRequest(model_name="counter", inputs=[n],
                             requested_output_names=["OUT"]).async_exec(decoupled=True)
                             for _ in range(2)]
                    streams = await asyncio.gather(*calls)
                    total, count = 0, 0
                    for stream in streams:
                        for response in stream:
                            if response.has_error():
                                raise pb_utils.TritonModelException(response.error().message())
                            if response.output_tensors():
                                total += int(pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()[0])
                                count += 1
                    out.append(pb_utils.InferenceResponse([
                        pb_utils.Tensor("SUM", np.array([total], np.int32)),
                        pb_utils.Tensor("COUNT", np.array([count], np.int32))]))
                return out
    """,
    ),
    # Decoupled: IN = n sends n responses (OUT = n, IDX = i) from a thread, then the final flag.
    "counter": (
        """
        model_transaction_policy { decoupled: true }
        input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
                 { name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] } ]
    """,
        """
        import json, threading
        import numpy as np
        import triton_python_backend_utils as pb_utils
        class TritonPythonModel:
            def initialize(self, args):
                assert pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))
            def execute(self, requests):
                for r in requests:
                    n = int(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()[0])
                    threading.Thread(target=self.send, args=(r.get_response_sender(), n)).start()
                return None
            def send(self, sender, n):
                for i in range(n):
                    sender.send(pb_utils.InferenceResponse([
                        pb_utils.Tensor("OUT", np.array([n], np.int32)),
                        pb_utils.Tensor("IDX", np.array([i], np.int32))]))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    """,
    ),
    # Custom metrics of each kind, updated by every execute.
    "metered": (
        """
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
        instance_group [ { count: 2 kind: KIND_CPU } ]
    """,
        """
        import numpy as np
        import triton_python_backend_utils as pb_utils
        class TritonPythonModel:
            def initialize(self, args):
                c = pb_utils.MetricFamily(name="test_requests", description="requests seen",
                                          kind=pb_utils.MetricFamily.COUNTER)
                g = pb_utils.MetricFamily(name="test_last_x", description="last x",
                                          kind=pb_utils.MetricFamily.GAUGE)
                h = pb_utils.MetricFamily(name="test_x", description="x values",
                                          kind=pb_utils.MetricFamily.HISTOGRAM)
                # The families are kept: as in Triton, a Metric whose family object is
                # gone refuses every operation.
                self.families = (c, g, h)
                self.count = c.Metric(labels={"model": "metered"})
                self.last = g.Metric(labels={"model": "metered"})
                self.hist = h.Metric(labels={"model": "metered"}, buckets=[1.0, 10.0])
            def execute(self, requests):
                out = []
                for r in requests:
                    x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
                    self.count.increment(1)
                    self.last.set(float(x[0]))
                    self.hist.observe(float(x[0]))
                    out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y",
                               np.array([self.count.value()], np.float32))]))
                return out
    """,
    ),
    # In a stub process: X = 1 kills the process mid-execute; otherwise answers its pid.
    "crasher": (
        """
        parameters { key: "thaw.python_runtime" value { string_value: "process" } }
        input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
    """,
        """
        import os
        import numpy as np
        import triton_python_backend_utils as pb_utils
        class TritonPythonModel:
            def execute(self, requests):
                x = int(pb_utils.get_input_tensor_by_name(requests[0], "X").as_numpy()[0])
                if x == 1:
                    os._exit(3)
                return [pb_utils.InferenceResponse([pb_utils.Tensor("PID", np.array([os.getpid()]))])
                        for _ in requests]
    """,
    ),
    # The default config (no thaw.python_runtime): X = 1 exits the process mid-execute, X = 2
    # takes 1.5 s (a line in <model>/started as it begins), otherwise it answers its pid at once.
    "default_crasher": (
        """
        input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
    """,
        """
        import os, time
        import numpy as np
        import triton_python_backend_utils as pb_utils
        class TritonPythonModel:
            def initialize(self, args):
                self.started_log = os.path.join(args["model_repository"], "started")

            def execute(self, requests):
                x = int(pb_utils.get_input_tensor_by_name(requests[0], "X").as_numpy()[0])
                if x == 1:
                    os._exit(1)
                if x == 2:
                    with open(self.started_log, "a") as log:
                        log.write("1\\n")
                    time.sleep(1.5)
                return [pb_utils.InferenceResponse([pb_utils.Tensor("PID", np.array([os.getpid()]))])
                        for _ in requests]
    """,
    ),
    # Big tensors through shared memory: answers the input back, and whether it was mapped.
    "big_echo": (
        """
        parameters { key: "thaw.python_runtime" value { string_value: "process" } }
        input [ { name: "X" data_type: TYPE_UINT8 dims: [ -1 ] } ]
        output [ { name: "Y" data_type: TYPE_UINT8 dims: [ -1 ] },
                 { name: "MAPPED" data_type: TYPE_BOOL dims: [ 1 ] } ]
    """,
        """
        import mmap
        import numpy as np
        import triton_python_backend_utils as pb_utils
        def mapped(array):
            seen = array
            while seen is not None:
                if isinstance(seen, mmap.mmap) or isinstance(getattr(seen, "obj", None), mmap.mmap):
                    return True
                seen = getattr(seen, "base", None)
            return False
        class TritonPythonModel:
            def execute(self, requests):
                out = []
                for r in requests:
                    x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
                    out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x[::-1].copy()),
                               pb_utils.Tensor("MAPPED", np.array([mapped(x)]))]))
                return out
    """,
    ),
}

_CPU_BOUND = """
    import os, time
    import numpy as np
    import triton_python_backend_utils as pb_utils
    class TritonPythonModel:
        def execute(self, requests):
            started = time.time()
            deadline = time.process_time() + 0.25  # 0.25 s of this process's CPU time
            x = 0
            while time.process_time() < deadline:
                x += 1
            span = np.array([started, time.time()])
            return [pb_utils.InferenceResponse([pb_utils.Tensor("PID", np.array([os.getpid()])),
                                                pb_utils.Tensor("SPAN", span)])
                    for _ in requests]
"""


def _cpu_config(count: int) -> str:
    return f"""
        input [ {{ name: "X" data_type: TYPE_INT32 dims: [ 1 ] }} ]
        output [ {{ name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }},
                 {{ name: "SPAN" data_type: TYPE_FP64 dims: [ 2 ] }} ]
        instance_group [ {{ count: {count} kind: KIND_CPU }} ]
    """


def _write(repo: Path, name: str, config: str, source: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\n' + textwrap.dedent(config)
    )
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(source))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("python-models")
    for name, (config, source) in MODELS.items():
        _write(repo, name, config, source)
    with serving(repo, timeout_s=120) as proc:
        yield proc


def _client(server: ServeProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.hostport)


def _vector_inputs() -> tuple[list[httpclient.InferInput], np.ndarray, np.ndarray]:
    a = np.random.rand(4).astype(np.float32)
    b = np.random.rand(4).astype(np.float32)
    inputs = [
        httpclient.InferInput("INPUT0", [4], "FP32"),
        httpclient.InferInput("INPUT1", [4], "FP32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a, b


def _int_input(name: str, value: int, datatype: str = "INT32") -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, [1], datatype)
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    return tensor


def test_bls_exec_calls_another_model_and_reports_its_errors(server: ServeProcess) -> None:
    inputs, a, b = _vector_inputs()
    with _client(server) as client:
        result = client.infer("bls_sync_caller", inputs)
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b)
        with pytest.raises(Exception, match="Model 'nowhere' is not ready"):
            client.infer("bls_sync_caller", inputs, parameters={"target": "nowhere"})


def test_async_execute_with_async_exec_to_a_decoupled_model(server: ServeProcess) -> None:
    with _client(server) as client:
        for n in (3, 0):
            result = client.infer("bls_async_caller", [_int_input("IN", n)])
            assert result.as_numpy("COUNT")[0] == 2 * n  # two streams of n responses each
            assert result.as_numpy("SUM")[0] == 2 * n * n


def test_decoupled_model_refuses_plain_infer_with_tritons_error(server: ServeProcess) -> None:
    body = json.dumps({"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [2]}]})
    request = urllib.request.Request(
        server.url + "/v2/models/counter/infer", data=body.encode(), method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 501
    assert json.loads(caught.value.read()) == {
        "error": "HTTP end point doesn't support models with decoupled transaction policy"
    }


def _post(url: str, doc: dict[str, object]) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, data=json.dumps(doc).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def test_generate_stream_sends_each_response_as_an_event(server: ServeProcess) -> None:
    status, kind, body = _post(
        server.url + "/v2/models/counter/generate_stream", {"IN": 3, "id": "7"}
    )
    assert status == 200 and kind == "text/event-stream; charset=utf-8"
    events = [json.loads(chunk.removeprefix(b"data: ")) for chunk in body.split(b"\n\n") if chunk]
    assert [e["IDX"] for e in events] == [0, 1, 2]
    assert all(e["OUT"] == 3 and e["id"] == "7" and e["model_name"] == "counter" for e in events)
    # Zero responses: an empty stream; /generate wants exactly one.
    status, _, body = _post(server.url + "/v2/models/counter/generate_stream", {"IN": 0})
    assert status == 200 and body == b""
    status, _, body = _post(server.url + "/v2/models/counter/generate", {"IN": 2})
    assert status == 500 and b"generate expects model to produce exactly 1 response" in body
    status, kind, body = _post(server.url + "/v2/models/counter/generate", {"IN": 1})
    assert status == 200 and kind == "application/json"
    assert json.loads(body)["OUT"] == 1
    # Refused before the model sees it: a plain JSON error.
    status, kind, body = _post(server.url + "/v2/models/counter/generate_stream", {"IN": "x"})
    assert status == 400 and kind == "application/json"
    assert json.loads(body)["error"] == (  # an infer request's `data` text, as Triton reads it
        "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer "
        "(input 'IN')"
    )


def test_custom_metrics_of_each_kind_are_exported(server: ServeProcess) -> None:
    with _client(server) as client:
        for x in (0.5, 5.0, 50.0):
            tensor = httpclient.InferInput("X", [1], "FP32")
            tensor.set_data_from_numpy(np.array([x], dtype=np.float32))
            counted = client.infer("metered", [tensor]).as_numpy("Y")[0]
    assert counted == 3  # value() of a counter both stub processes add to
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    assert "# TYPE test_requests counter" in text
    assert 'test_requests{model="metered"} 3\n' in text
    assert 'test_last_x{model="metered"} 50\n' in text
    # Bounds as Triton writes them (`le="1"`, not "1.0"; its qa custom_metrics compares text).
    assert 'test_x_bucket{le="1",model="metered"} 1\n' in text
    assert 'test_x_bucket{le="10",model="metered"} 2\n' in text
    assert 'test_x_count{model="metered"} 3\n' in text


def test_a_crashing_stub_fails_its_request_and_restarts(server: ServeProcess) -> None:
    with _client(server) as client:
        first = client.infer("crasher", [_int_input("X", 0)]).as_numpy("PID")[0]
        with pytest.raises(Exception, match="Stub process 'crasher_0' is not healthy"):
            client.infer("crasher", [_int_input("X", 1)])
        deadline = time.monotonic() + 30
        while True:
            try:
                second = client.infer("crasher", [_int_input("X", 0)]).as_numpy("PID")[0]
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert second != first and second != server.proc.pid
        assert client.is_server_live() and client.infer("adder", _vector_inputs()[0])


def _infer_x(server: ServeProcess, model: str, x: int) -> tuple[int, dict[str, object]]:
    """(status, JSON body) of a plain JSON infer with X = x."""
    doc = {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": [x]}]}
    status, _, body = _post(server.url + f"/v2/models/{model}/infer", doc)
    return status, json.loads(body)


def _pid_once_restarted(server: ServeProcess, model: str) -> int:
    """The pid answering X = 0: a request that comes while the stub restarts waits for it."""
    status, doc = _infer_x(server, model, 0)
    assert status == 200, doc
    return int(doc["outputs"][0]["data"][0])  # type: ignore[index]


def test_by_default_a_model_that_exits_fails_only_its_request_and_restarts(
    server: ServeProcess,
) -> None:
    status, doc = _infer_x(server, "default_crasher", 0)
    first = int(doc["outputs"][0]["data"][0])  # type: ignore[index]
    assert status == 200 and first != server.proc.pid  # a stub process, as Triton's
    status, doc = _infer_x(server, "default_crasher", 1)
    assert status == 500
    assert doc == {
        "error": "Failed to process the request(s) for model 'default_crasher_0', message: "
        "Stub process 'default_crasher_0' is not healthy."
    }
    with _client(server) as client:  # the server keeps serving everything else
        assert client.is_server_live() and client.infer("adder", _vector_inputs()[0])
    second = _pid_once_restarted(server, "default_crasher")
    assert second not in (first, server.proc.pid)  # a new stub: initialize ran again


def _until_queued(server: ServeProcess, model: str, count: int) -> None:
    deadline = time.monotonic() + 30
    while metric(server.url, "nv_inference_pending_request_count", model=model) < count:
        assert time.monotonic() < deadline, f"{count} requests of {model} never queued"
        time.sleep(0.01)


def test_requests_queued_behind_a_crash_run_on_the_restarted_stub(server: ServeProcess) -> None:
    before = _pid_once_restarted(server, "default_crasher")
    model_dir = server.repo / "default_crasher"
    begun = models.begun(model_dir)
    with ThreadPoolExecutor(4) as pool:
        slow = pool.submit(_infer_x, server, "default_crasher", 2)  # runs 1.5 s in the stub
        models.wait_begun(model_dir, begun)
        crash = pool.submit(_infer_x, server, "default_crasher", 1)  # next in line: exits
        _until_queued(server, "default_crasher", 1)
        after = [pool.submit(_infer_x, server, "default_crasher", 0) for _ in range(2)]
        assert slow.result(30)[0] == 200, slow.result()
        assert crash.result(30)[0] == 500
        answers = [future.result(60) for future in after]
    # The two behind the crash never started there: they ran on the next stub, and succeeded.
    assert [status for status, _ in answers] == [200, 200]
    pids = {int(doc["outputs"][0]["data"][0]) for _, doc in answers}  # type: ignore[index]
    assert len(pids) == 1 and before not in pids


def test_large_tensors_cross_through_shared_memory(server: ServeProcess) -> None:
    data = np.random.randint(0, 255, size=24 * 1024 * 1024, dtype=np.uint8)
    tensor = httpclient.InferInput("X", [data.size], "UINT8")
    tensor.set_data_from_numpy(data, binary_data=True)
    with _client(server) as client:
        result = client.infer("big_echo", [tensor], timeout=120)
    np.testing.assert_array_equal(result.as_numpy("Y"), data[::-1])
    assert bool(result.as_numpy("MAPPED")[0])  # the stub read it in place, from a memfd


def _burn(repo_root: Path, count: int, requests: int) -> list[tuple[int, float, float]]:
    """(pid, wall-clock start, end) of each of `requests` concurrent executions."""
    repo = repo_root / f"burn{count}"
    _write(repo, "burner", _cpu_config(count), _CPU_BOUND)
    proc = ServeProcess(repo)
    try:
        proc.wait_ready(timeout_s=120)
        with httpclient.InferenceServerClient(proc.hostport, concurrency=requests) as client:
            client.infer("burner", [_int_input("X", 0)])  # warm
            pending = [client.async_infer("burner", [_int_input("X", 0)]) for _ in range(requests)]
            results = [p.get_result() for p in pending]
    finally:
        proc.stop()
    spans = []
    for result in results:
        start, end = result.as_numpy("SPAN")
        spans.append((int(result.as_numpy("PID")[0]), float(start), float(end)))
    return spans


def _overlap(spans: list[tuple[int, float, float]]) -> bool:
    """Whether any two executions ran at the same time."""
    ordered = sorted(spans, key=lambda span: span[1])
    return any(nxt[1] < cur[2] for cur, nxt in itertools.pairwise(ordered))


def test_two_instances_are_two_processes_running_in_parallel(tmp_path: Path) -> None:
    # Wall-clock spans, not durations: whether executions overlap does not depend on how loaded
    # the machine is (each burns 0.25 s of its own CPU time, so it spans at least 0.25 s).
    one = _burn(tmp_path, 1, 2)
    two = _burn(tmp_path, 2, 2)
    assert len({pid for pid, _, _ in one}) == 1 and len({pid for pid, _, _ in two}) == 2
    assert not _overlap(one), f"one instance ran two executions at once: {one}"
    assert _overlap(two), f"two instances ran one after the other: {two}"


def test_execution_env_path_runs_the_stub_with_that_python(tmp_path: Path) -> None:
    env_dir = tmp_path / "repo" / "env_model" / "pyenv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    # The environment's own packages: numpy, which the stub needs (as Triton's needs it too).
    numpy_home = Path(np.__file__).resolve().parent.parent
    (site,) = env_dir.glob("lib/python*/site-packages")
    (site / "numpy_home.pth").write_text(f"{numpy_home}\n")
    _write(
        tmp_path / "repo",
        "env_model",
        """
        parameters { key: "EXECUTION_ENV_PATH" value { string_value: "$$TRITON_MODEL_DIRECTORY/pyenv" } }
        input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "PREFIX" data_type: TYPE_STRING dims: [ 1 ] } ]
    """,
        """
        import sys
        import numpy as np
        import triton_python_backend_utils as pb_utils
        class TritonPythonModel:
            def execute(self, requests):
                return [pb_utils.InferenceResponse([pb_utils.Tensor("PREFIX",
                        np.array([sys.prefix.encode()], dtype=np.object_))]) for _ in requests]
    """,
    )
    proc = ServeProcess(tmp_path / "repo")
    try:
        proc.wait_ready(timeout_s=120)
        with httpclient.InferenceServerClient(proc.hostport) as client:
            prefix = client.infer("env_model", [_int_input("X", 0)]).as_numpy("PREFIX")[0]
    finally:
        proc.stop()
    assert Path(prefix.decode()).resolve() == env_dir.resolve()


def test_pool_of_requests_against_bls_and_stub_models_keeps_serving(server: ServeProcess) -> None:
    def one(_: int) -> bool:
        with _client(server) as client:
            inputs, a, b = _vector_inputs()
            result = client.infer("bls_sync_caller", inputs)
            return bool(np.allclose(result.as_numpy("OUTPUT0"), a + b))

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(one, range(32)))
