"""The native front answering hot Python models' infers itself (decision 0032, phase 2): a real
`thaw serve --front native`, its real front and real stubs, against `--front python` on the
same repository.

The same requests get the same answers (status, content type, coding, body) whether the front
answers them itself (JSON and binary tensors, named outputs, batches, tensors too large for a
datagram, compression) or forwards them (anything it does not certainly take), and every
failure's words are `thaw serve`'s (the front asks it: runtime.http.front_outcome). The
statistics count the same; a stub that dies is restarted and relayed again; an unload retires
the version first and the model's finalize() runs, at an unload and at a stop.
"""

from __future__ import annotations

import gzip
import json
import socket
import struct
import time
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from tests.fixtures.native_front_models import (
    front_built,
    hot_repo,
    server_cpu_s,
    wait_hot,
    write_model,
)
from tests.fixtures.serve_process import ServeProcess, both_fronts

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not front_built(), reason="the native front is not built (make native)"),
]

FLAGS = ("--allow-metrics=false",)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServeProcess]]:
    root = tmp_path_factory.mktemp("hot")
    with both_fronts(hot_repo(root, root / "finalized.txt"), *FLAGS) as started:
        wait_hot(started["native"], ("big", "types", "faulty"))
        yield started


def _tensor(name: str, datatype: str, shape: list[int], data: list[object]) -> dict[str, object]:
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


def _types_doc(rows: int = 1, **extra: object) -> dict[str, object]:
    return {
        "inputs": [
            _tensor("F", "FP32", [rows, 3], [0.1, -2.5, 3e38] * rows),
            _tensor("I", "INT64", [rows, 2], [2**40, -5] * rows),
            _tensor("B", "BOOL", [rows, 2], [True, False] * rows),
            _tensor("U", "UINT8", [rows, 3], [0, 7, 255] * rows),
        ],
        **extra,
    }


def _binary(doc: dict[str, object], blobs: dict[str, bytes]) -> tuple[bytes, dict[str, str]]:
    """`doc` with the named inputs' data sent as binary tensors after the JSON."""
    inputs = doc["inputs"]
    assert isinstance(inputs, list)
    tail = b""
    for entry in inputs:
        if entry["name"] in blobs:
            del entry["data"]
            entry["parameters"] = {"binary_data_size": len(blobs[entry["name"]])}
            tail += blobs[entry["name"]]
    header = json.dumps(doc).encode()
    return header + tail, {"Inference-Header-Content-Length": str(len(header))}


def _mode(mode: int) -> bytes:
    return json.dumps({"inputs": [_tensor("MODE", "INT32", [1], [mode])]}).encode()


def _big(count: int, **extra: object) -> bytes:
    values = [float(i % 97) for i in range(count)]
    return json.dumps(
        {"inputs": [_tensor("INPUT0", "FP32", [count], values),
                    _tensor("INPUT1", "FP32", [count], values)], **extra}
    ).encode()  # fmt: skip


_BINARY_TYPES, _BINARY_HEADERS = _binary(
    _types_doc(2), {"F": struct.pack("<6f", 1, 2, 3, 4, 5, 6), "U": bytes([1, 2, 3, 4, 5, 6])}
)

# name -> (path, body, headers)
CASES: dict[str, tuple[str, bytes, dict[str, str]]] = {
    "json": ("/v2/models/types/infer", json.dumps(_types_doc()).encode(), {}),
    "json, versioned, an id": (
        "/v2/models/types/versions/1/infer",
        json.dumps(_types_doc(id="req-7")).encode(),
        {},
    ),
    "a batch of 3": ("/v2/models/types/infer", json.dumps(_types_doc(3)).encode(), {}),
    "named outputs, one binary": (
        "/v2/models/types/infer",
        json.dumps(
            _types_doc(outputs=[{"name": "S", "parameters": {"binary_data": True}}, {"name": "F2"}])
        ).encode(),
        {},
    ),
    "a listed output stays JSON under binary_data_output": (
        "/v2/models/types/infer",
        json.dumps(
            _types_doc(parameters={"binary_data_output": True}, outputs=[{"name": "I2"}])
        ).encode(),
        {},
    ),
    "an output the config does not declare": ("/v2/models/faulty/infer", _mode(5), {}),
    "binary outputs": (
        "/v2/models/types/infer",
        json.dumps(_types_doc(parameters={"binary_data_output": True})).encode(),
        {},
    ),
    "binary inputs": ("/v2/models/types/infer", _BINARY_TYPES, _BINARY_HEADERS),
    "tensors in memfds": ("/v2/models/big/infer", _big(30_000), {}),
    "compressed answer": ("/v2/models/big/infer", _big(500), {"Accept-Encoding": "gzip"}),
    "deflate, binary": (
        "/v2/models/big/infer",
        _big(500, parameters={"binary_data_output": True}),
        {"Accept-Encoding": "br;q=1, deflate"},
    ),
    # Forwarded: what the front does not certainly take is `thaw serve`'s to answer.
    "a model parameter": (
        "/v2/models/types/infer",
        json.dumps(_types_doc(parameters={"x": 1})).encode(),
        {},
    ),
    "wrong datatype": (
        "/v2/models/faulty/infer",
        json.dumps({"inputs": [_tensor("MODE", "INT64", [1], [0])]}).encode(),
        {},
    ),
    "wrong shape": (
        "/v2/models/faulty/infer",
        json.dumps({"inputs": [_tensor("MODE", "INT32", [2], [0, 0])]}).encode(),
        {},
    ),
    "a float for INT32": (
        "/v2/models/faulty/infer",
        json.dumps({"inputs": [_tensor("MODE", "INT32", [1], [0.5])]}).encode(),
        {},
    ),
    "a missing input": ("/v2/models/types/infer", b'{"inputs": []}', {}),
    "an unknown output": (
        "/v2/models/faulty/infer",
        json.dumps(
            {"inputs": [_tensor("MODE", "INT32", [1], [0])], "outputs": [{"name": "NOPE"}]}
        ).encode(),
        {},
    ),
    "batch over max_batch_size": ("/v2/models/types/infer", json.dumps(_types_doc(9)).encode(), {}),
    # Outcomes the front hands to `thaw serve`.
    "the model's error": ("/v2/models/faulty/infer", _mode(1), {}),
    "execute raises": ("/v2/models/faulty/infer", _mode(2), {}),
    "bytes that are not UTF-8": ("/v2/models/faulty/infer", _mode(4), {}),
    "a good one": ("/v2/models/faulty/infer", _mode(0), {}),
}


def _post(
    server: ServeProcess, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(server.url + path, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, head, raw = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        status, head, raw = exc.code, dict(exc.headers), exc.read()
    coding = head.get("Content-Encoding")
    if coding == "gzip":
        raw = gzip.decompress(raw)
    elif coding == "deflate":
        raw = zlib.decompress(raw)
    return status, head, raw


def _answer(server: ServeProcess, name: str) -> tuple[int, str, str | None, str | None, bytes]:
    path, body, headers = CASES[name]
    status, head, raw = _post(server, path, body, headers)
    return (
        status,
        head.get("Content-Type", ""),
        head.get("Content-Encoding"),
        head.get("Inference-Header-Content-Length"),
        raw,
    )


@pytest.mark.parametrize("name", list(CASES))
def test_the_same_request_gets_the_same_answer(servers: dict[str, ServeProcess], name: str) -> None:
    python, native = (_answer(servers[f], name) for f in ("python", "native"))
    assert native == python


def _stats(server: ServeProcess, model: str) -> dict[str, object]:
    with urllib.request.urlopen(f"{server.url}/v2/models/{model}/stats", timeout=30) as r:
        row = json.loads(r.read())["model_stats"][0]
    stats = row["inference_stats"]
    return {
        "inferences": row["inference_count"],
        "executions": row["execution_count"],
        "success": stats["success"]["count"],
        "fail": stats["fail"]["count"],
        "queue": stats["queue"]["count"],
        "compute_infer": stats["compute_infer"]["count"],
        "batches": {b["batch_size"]: b["compute_infer"]["count"] for b in row["batch_stats"]},
    }


def test_the_front_answers_hot_infers_itself(servers: dict[str, ServeProcess]) -> None:
    """A hot infer costs the Python server next to nothing: over 200 of them its own CPU grows
    by under a quarter of what they cost the server behind the Python front (same run)."""
    grown = {}
    for front in ("python", "native"):
        server = servers[front]
        before = server_cpu_s(server)
        for _ in range(200):
            assert _post(server, *CASES["json"])[0] == 200
        grown[front] = server_cpu_s(server) - before
    assert grown["native"] < grown["python"] / 4, grown


def test_the_statistics_count_alike(servers: dict[str, ServeProcess]) -> None:
    """What the front answered itself is in `thaw serve`'s statistics, failures included."""
    for front in ("python", "native"):
        for _ in range(3):
            _post(servers[front], *CASES["a batch of 3"])
            _post(servers[front], *CASES["the model's error"])
    python, native = (
        {m: _stats(servers[f], m) for m in ("types", "faulty")} for f in ("python", "native")
    )
    assert native == python
    # The model's own error responses are answered requests (as Triton counts them).
    assert native["types"]["success"] >= 3 and native["faulty"]["success"] >= 3
    # Over gRPC too, at once.
    _post(servers["native"], *CASES["a batch of 3"])
    with grpcclient.InferenceServerClient(servers["native"].grpc_address) as client:
        row = client.get_inference_statistics("types", as_json=True)["model_stats"][0]
    assert int(row["inference_stats"]["success"]["count"]) == native["types"]["success"] + 1


def test_a_stub_that_dies_is_relayed_again(servers: dict[str, ServeProcess]) -> None:
    python, native = (_post(servers[f], "/v2/models/faulty/infer", _mode(3), {})
                      for f in ("python", "native"))  # fmt: skip
    assert native[0] == python[0] == 500
    assert json.loads(native[2]) == json.loads(python[2])
    assert b"is not healthy" in native[2]
    # The instance's next stub answers, through the front again.
    before = _stats(servers["native"], "faulty")["success"]
    deadline = time.monotonic() + 60
    while True:
        status, _, raw = _post(servers["native"], "/v2/models/faulty/infer", _mode(0), {})
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status == 200, raw
    assert _stats(servers["native"], "faulty")["success"] == before + 1
    relayed = "model=faulty instance faulty_0_0: its stub is relayed by the native front"
    assert servers["native"].logs().count(relayed) == 2  # the first stub, and the next


def _unload(server: ServeProcess, model: str) -> None:
    request = urllib.request.Request(
        f"{server.url}/v2/repository/models/{model}/unload", data=b"{}", method="POST"
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200


def _load(server: ServeProcess, model: str) -> None:
    request = urllib.request.Request(
        f"{server.url}/v2/repository/models/{model}/load", data=b"{}", method="POST"
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.status == 200


def test_an_unload_retires_the_version_and_finalize_runs(tmp_path: Path) -> None:
    marker = tmp_path / "finalized.txt"
    repo = hot_repo(tmp_path, marker)
    args = (*FLAGS, "--model-control-mode", "explicit", "--load-model", "faulty")
    with both_fronts(repo, *args) as started:
        native = started["native"]
        wait_hot(native, ("faulty",))
        assert _post(native, "/v2/models/faulty/infer", _mode(0), {})[0] == 200
        for server in started.values():
            _unload(server, "faulty")
        assert marker.read_text().count("finalized") == 2  # one per front's server
        answers = [_post(s, "/v2/models/faulty/infer", _mode(0), {}) for s in started.values()]
        assert answers[0][0] == answers[1][0] != 200
        assert answers[0][2] == answers[1][2]
        _load(native, "faulty")
        wait_hot(native, ("faulty",), times=2)
        assert _post(native, "/v2/models/faulty/infer", _mode(0), {})[0] == 200


def test_a_stop_runs_each_models_finalize(tmp_path: Path) -> None:
    """The front relays the stubs until the models are unloaded: finalize() runs at a stop,
    and no stub is started again for a relay that went with the front."""
    marker = tmp_path / "finalized.txt"
    server = ServeProcess(hot_repo(tmp_path, marker), "--front", "native", *FLAGS)
    try:
        server.wait_ready()
        wait_hot(server, ("faulty",))
        assert _post(server, "/v2/models/faulty/infer", _mode(0), {})[0] == 200
    finally:
        code = server.stop()
    assert code == 0
    assert marker.read_text() == "finalized\n"
    assert "restarting it" not in server.log_path.read_text()


def test_only_the_front_knows_the_outcome_route(servers: dict[str, ServeProcess]) -> None:
    """A client's own request for the front's route is refused as an unknown path."""
    body = json.dumps({"model": "faulty", "version": "1", "kind": "unhealthy"}).encode()
    native = _post(servers["native"], "/thaw-front/outcome", body,
                   {"X-Thaw-Front-Token": "guess"})  # fmt: skip
    python = _post(servers["python"], "/thaw-front/outcome", body, {})
    assert native[0] == python[0] == 404
    assert native[2] == python[2]


def test_while_tracing_or_verbose_the_server_answers(tmp_path: Path) -> None:
    """Traces and verbose log lines are the server's to write: while a setting asks for
    either, the front forwards every infer (and takes them again after)."""
    repo = hot_repo(tmp_path, tmp_path / "finalized.txt")
    trace = tmp_path / "trace.json"
    server = ServeProcess(
        repo, "--front", "native", *FLAGS, "--trace-config", f"triton,file={trace}",
        "--trace-config", "rate=1",
    )  # fmt: skip
    try:
        server.wait_ready()
        wait_hot(server, ("faulty",))
        settings = server.url + "/v2/trace/setting"
        on = json.dumps({"trace_level": ["TIMESTAMPS"]}).encode()
        with urllib.request.urlopen(urllib.request.Request(settings, data=on), timeout=30):
            pass
        assert _post(server, "/v2/models/faulty/infer", _mode(0), {})[0] == 200
        off = json.dumps({"trace_level": ["OFF"]}).encode()
        with urllib.request.urlopen(urllib.request.Request(settings, data=off), timeout=30):
            pass
        assert _post(server, "/v2/models/faulty/infer", _mode(0), {})[0] == 200
        logging = server.url + "/v2/logging"
        verbose = json.dumps({"log_verbose_level": 1}).encode()
        with urllib.request.urlopen(urllib.request.Request(logging, data=verbose), timeout=30):
            pass
        time.sleep(1.0)  # the front is told within a quarter of a second
        assert _post(server, "/v2/models/faulty/infer", _mode(0), {})[0] == 200
    finally:
        assert server.stop() == 0
    traced = json.loads(trace.read_text())
    assert len({t["id"] for t in traced if t.get("model_name") == "faulty"}) == 1
    logs = server.log_path.read_text()
    assert logs.count("HTTP request: POST /v2/models/faulty/infer") == 1


def test_instances_added_and_removed_by_a_reload(tmp_path: Path) -> None:
    """A reload that changes the instance count keeps the version hot: the new instance's stub
    is relayed, a removed one is retired alone (its finalize() runs) and the rest go on."""
    import tritonclient.http as httpclient

    marker = tmp_path / "finalized.txt"
    repo = hot_repo(tmp_path, marker)
    server = ServeProcess(
        repo, "--front", "native", *FLAGS, "--model-control-mode", "explicit",
        "--load-model", "faulty",
    )  # fmt: skip
    try:
        server.wait_ready()
        wait_hot(server, ("faulty",))
        with httpclient.InferenceServerClient(server.hostport) as client:
            config = client.get_model_config("faulty")
            for count, relayed in ((3, 3), (1, 3)):  # 2 more relayed, then none
                config["instance_group"][0]["count"] = count
                client.load_model("faulty", config=json.dumps(config))
                answers = [_post(server, "/v2/models/faulty/infer", _mode(0), {})
                           for _ in range(12)]  # fmt: skip
                assert {a[0] for a in answers} == {200}, answers
                deadline = time.monotonic() + 30
                while server.logs().count("its stub is relayed by the native front") < relayed:
                    assert time.monotonic() < deadline, server.logs()[-3000:]
                    time.sleep(0.05)
        assert marker.read_text().count("finalized") == 2  # the two instances removed
        stats = _stats(server, "faulty")
        assert stats["success"] == 24 and stats["fail"] == 0
    finally:
        assert server.stop() == 0


_WATCHER = """
name: "watcher"
backend: "python"
max_batch_size: 0
input [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "marker" value: { string_value: "MARKER" } }
"""

# Waits (up to 20 s) for its request to be cancelled, and says so in the marker file.
_WATCHER_MODEL = """
import json
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.marker = config["parameters"]["marker"]["string_value"]

    def execute(self, requests):
        out = []
        for request in requests:
            deadline = time.monotonic() + 20
            while not request.is_cancelled() and time.monotonic() < deadline:
                time.sleep(0.05)
            with open(self.marker, "a") as f:
                f.write(f"cancelled={request.is_cancelled()}\\n")
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([1], dtype=np.int32))]))
        return out
"""


def test_a_model_sees_its_client_go_away(tmp_path: Path) -> None:
    """`is_cancelled()` of a request the front sent is the front's to answer: true once its
    client closed the connection."""
    marker = tmp_path / "cancelled.txt"
    repo = tmp_path / "repo"
    write_model(repo, "watcher", _WATCHER.replace("MARKER", str(marker)), _WATCHER_MODEL)
    server = ServeProcess(repo, "--front", "native", *FLAGS)
    try:
        server.wait_ready()
        wait_hot(server, ("watcher",))
        host, port = server.hostport.rsplit(":", 1)
        body = json.dumps({"inputs": [_tensor("MODE", "INT32", [1], [0])]}).encode()
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                b"POST /v2/models/watcher/infer HTTP/1.1\r\nHost: x\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            time.sleep(1.0)  # the execute runs, its client waits
        deadline = time.monotonic() + 15
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.read_text() == "cancelled=True\n"
    finally:
        server.stop()


def test_the_metrics_say_what_the_front_took(tmp_path: Path) -> None:
    """`thaw_native_front_answered_total` counts the infers the front took itself, successes
    and the failures the server answered for it; a request it forwards is not counted."""
    server = ServeProcess(
        hot_repo(tmp_path, tmp_path / "finalized.txt"), "--front", "native", "--metrics-port", "0"
    )
    try:
        server.wait_ready()
        wait_hot(server, ("faulty",))
        for body in (_mode(0), _mode(0), _mode(1)):  # two answers and the model's error
            _post(server, "/v2/models/faulty/infer", body, {})
        forwarded = json.dumps({"inputs": [_tensor("MODE", "INT64", [1], [0])]}).encode()
        assert _post(server, "/v2/models/faulty/infer", forwarded, {})[0] == 400
        with urllib.request.urlopen(server.url + "/metrics", timeout=30) as response:
            page = response.read().decode()
    finally:
        server.stop()
    assert 'thaw_native_front_answered_total{model="faulty",version="1"} 3\n' in page, page
    assert 'nv_inference_request_success{model="faulty",version="1"} 3' in page
