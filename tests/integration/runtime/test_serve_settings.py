"""`thaw serve`'s logging and trace extensions over real HTTP and gRPC (tritonclient): the log
settings change what the server writes to the operator's `--log-file`, the trace settings merge
model over global over `--trace-config`, and no client can name a file (CVE-2024-0087,
CVE-2024-0100) or crash the server with a bad value."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import make_add_sub
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeProcess, Path]]:
    base = tmp_path_factory.mktemp("settings")
    repo = base / "repo"
    for name in ("add_sub", "first", "second"):
        make_add_sub(repo, name)
    log_file = base / "server.log"
    server = ServeProcess(
        repo, "--grpc-port", "0", "--model-control-mode", "explicit", "--load-model", "*",
        "--log-file", str(log_file), "--trace-config", f"triton,file={base / 'trace.log'}",
        "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1",
    )  # fmt: skip
    server.wait_ready()
    yield server, base
    server.stop()


@pytest.fixture
def http(served: tuple[ServeProcess, Path]) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(served[0].hostport)
    yield client
    client.update_log_settings({"log_info": True, "log_verbose_level": 0, "log_format": "default"})
    client.update_trace_settings(settings={"trace_level": None, "trace_rate": None})
    client.update_trace_settings("add_sub", {"trace_level": None, "trace_rate": None})
    client.close()


@pytest.fixture
def grpc_client(served: tuple[ServeProcess, Path]) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(served[0].grpc_address) as client:
        yield client


def _post(hostport: str, path: str, body: bytes, method: str = "POST") -> tuple[int, Any]:
    request = urllib.request.Request(f"http://{hostport}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_log_settings_change_what_the_operators_file_gets(
    served: tuple[ServeProcess, Path], http: httpclient.InferenceServerClient
) -> None:
    server, base = served
    log_file = base / "server.log"
    assert http.get_log_settings() == {
        "log_file": str(log_file), "log_info": True, "log_warning": True, "log_error": True,
        "log_verbose_level": 0, "log_format": "default",
    }  # fmt: skip
    assert http.update_log_settings({"log_info": False})["log_info"] is False
    http.unload_model("first")
    assert http.update_log_settings({"log_info": True})["log_info"] is True
    http.unload_model("second")
    text = log_file.read_text()
    assert "successfully unloaded 'second' version 1" in text
    assert "successfully unloaded 'first'" not in text  # INFO was off
    assert "unloaded 'second'" not in server.logs()  # the file only, as Triton's --log-file


def test_iso8601_lines_follow_a_format_change_at_once(
    served: tuple[ServeProcess, Path],
    grpc_client: grpcclient.InferenceServerClient,
    http: httpclient.InferenceServerClient,
) -> None:
    _, base = served
    settings = grpc_client.update_log_settings({"log_format": "ISO8601"})
    assert settings.settings["log_format"].string_param == "ISO8601"
    http.load_model("first")
    http.unload_model("first")
    line = [x for x in (base / "server.log").read_text().splitlines() if "unloaded 'first'" in x][
        -1
    ]
    stamp, severity = line.split(" ")[:2]
    assert stamp.endswith("Z") and "T" in stamp and severity == "I", line


def test_trace_settings_merge_model_over_global_over_the_operators(
    served: tuple[ServeProcess, Path],
    http: httpclient.InferenceServerClient,
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    _, base = served
    operator = {
        "trace_file": str(base / "trace.log"), "trace_level": ["TIMESTAMPS"], "trace_rate": "1",
        "trace_count": "-1", "log_frequency": "0", "trace_mode": "triton",
    }  # fmt: skip
    assert http.get_trace_settings() == operator
    assert http.update_trace_settings("add_sub", {"trace_rate": "12"})["trace_rate"] == "12"
    http.update_trace_settings(settings={"trace_level": ["TIMESTAMPS", "TENSORS"]})
    model = grpc_client.get_trace_settings("add_sub").settings
    assert list(model["trace_level"].value) == ["TIMESTAMPS", "TENSORS"]  # the global one's
    assert list(model["trace_rate"].value) == ["12"]  # its own
    cleared = grpc_client.update_trace_settings("add_sub", {"trace_rate": None}).settings
    assert list(cleared["trace_rate"].value) == ["1"]
    assert http.get_trace_settings()["trace_rate"] == "1"


@pytest.mark.parametrize("path", ["../../etc/passwd", "evil.log", "/tmp/thaw-evil.log"])
def test_no_client_names_a_file(
    served: tuple[ServeProcess, Path],
    http: httpclient.InferenceServerClient,
    grpc_client: grpcclient.InferenceServerClient,
    path: str,
) -> None:
    server, base = served
    before = http.get_log_settings()
    status, body = _post(server.hostport, "/v2/logging", json.dumps({"log_file": path}).encode())
    assert (status, body) == (
        501, {"error": "log file location can not be updated through network protocol"}
    )  # fmt: skip
    status, body = _post(
        server.hostport, "/v2/models/add_sub/trace/setting",
        json.dumps({"trace_file": path, "trace_rate": "3"}).encode(),
    )  # fmt: skip
    assert (status, body) == (
        501, {"error": "trace file location can not be updated through network protocol"}
    )  # fmt: skip
    for call in (
        lambda: grpc_client.update_log_settings({"log_file": path}),
        lambda: grpc_client.update_trace_settings(settings={"trace_file": path}),
    ):
        with pytest.raises(InferenceServerException, match="can not be updated") as info:
            call()
        assert info.value.status() == str(grpc.StatusCode.UNIMPLEMENTED)
    assert http.get_log_settings() == before
    assert http.get_trace_settings("add_sub")["trace_rate"] == "1"  # nothing applied
    assert not Path("/tmp/thaw-evil.log").exists() and not (base / "evil.log").exists()


@pytest.mark.parametrize(
    ("path", "body", "status", "error"),
    [
        ("/v2/logging", b'{"log_info": "no"}', 400, "expect boolean for 'log_info'"),
        ("/v2/logging", b'{"log_verbose_level": -3}', 400, "'log_verbose_level' = -3"),
        ("/v2/logging", b'{"log_format": "JSON"}', 400, "invalid argument for log_format"),
        ("/v2/logging", b'{"log_colour": true}', 400, "unknown log setting 'log_colour'"),
        ("/v2/logging", b"[1, 2]", 400, "must be a JSON object"),
        ("/v2/logging", b"{not json", 400, "failed to parse the request JSON"),
        ("/v2/logging", b"[" * 100_000, 413, "over 65536 bytes"),
        ("/v2/trace/setting", b'{"trace_rate": "x"}', 400, "Unable to parse 'trace_rate'"),
        ("/v2/trace/setting", b'{"trace_count": "-5"}', 400, "out of range [ -1, "),
        ("/v2/trace/setting", b'{"trace_level": ["OFF", "TENSORS"]}', 400, "only one"),
        ("/v2/trace/setting", b'{"trace_level": 7}', 400, "list of level names"),
        ("/v2/trace/setting", b'{"trace_rate": "0"}', 400, "sample rate must be non-zero"),
        ("/v2/models/nope/trace/setting", b"{}", 400, "Request for unknown model : nope"),
    ],
)
def test_bad_settings_are_refused_cleanly(
    served: tuple[ServeProcess, Path], path: str, body: bytes, status: int, error: str
) -> None:
    server, _ = served
    got_status, got = _post(server.hostport, path, body)
    assert got_status == status and error in got["error"], got
    assert _post(server.hostport, "/v2/health/live", b"", method="GET")[0] == 200


def test_other_methods_are_not_allowed(served: tuple[ServeProcess, Path]) -> None:
    status, body = _post(served[0].hostport, "/v2/logging", b"{}", method="PUT")
    assert (status, body) == (405, {"error": "Method Not Allowed"})


def test_grpc_refusals_carry_tritons_codes(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    calls: list[tuple[Callable[[], Any], str, grpc.StatusCode]] = [
        (lambda: grpc_client.update_log_settings({"log_format": "JSON"}),
         "invalid argument for log_format, got: JSON", grpc.StatusCode.INVALID_ARGUMENT),
        (lambda: grpc_client.update_trace_settings(settings={"trace_rate": "1x"}),
         "Unable to parse 'trace_rate'", grpc.StatusCode.INVALID_ARGUMENT),
        (lambda: grpc_client.get_trace_settings("nope"), "Request for unknown model : nope",
         grpc.StatusCode.INVALID_ARGUMENT),
    ]  # fmt: skip
    for call, message, code in calls:
        with pytest.raises(InferenceServerException, match=message) as info:
            call()
        assert info.value.status() == str(code)


def test_a_grpc_setting_of_the_wrong_kind_is_refused(served: tuple[ServeProcess, Path]) -> None:
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    with grpc.insecure_channel(served[0].grpc_address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.LogSettingsRequest()
        request.settings["log_info"].string_param = "false"
        with pytest.raises(grpc.RpcError) as info:
            stub.LogSettings(request)
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "expect boolean for 'log_info'" in (info.value.details() or "")
        trace = service_pb2.TraceSettingRequest(model_name="add_sub")
        trace.settings["trace_count"].value.extend(["1", "2"])
        with pytest.raises(grpc.RpcError) as info:
            stub.TraceSetting(trace)
        assert "expect only 1 value for 'trace_count'" in (info.value.details() or "")


# ---- trace records ------------------------------------------------------------------------

_ACTIVITIES = [
    "REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END",
]  # fmt: skip
# An HTTP request's trace has its frontend's activities around them, as Triton's.
_HTTP_BEFORE = ["HTTP_RECV_START", "HTTP_RECV_END"]
_HTTP_AFTER = ["HTTP_SEND_START", "HTTP_SEND_END"]


def _written(path: Path) -> Path:
    """`path` once written: a trace is written when its answer has been sent, a moment after
    the client has it."""
    deadline = time.monotonic() + 30
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return path


def _infer(client: httpclient.InferenceServerClient, model: str, n: int, tag: str) -> None:
    import numpy as np

    inputs = []
    for name in ("INPUT0", "INPUT1"):
        x = httpclient.InferInput(name, [4], "FP32")
        x.set_data_from_numpy(np.ones(4, np.float32))
        inputs.append(x)
    for i in range(n):
        client.infer(model, inputs, request_id=f"{tag}{i}")


def _traces(path: Path) -> dict[int, dict[str, Any]]:
    """Triton's trace file: per id, its head (model, version, request id) and its activities."""
    found: dict[int, dict[str, Any]] = {}
    for entry in json.loads(path.read_text()):
        trace = found.setdefault(entry["id"], {"activities": []})
        if "timestamps" in entry:
            trace["activities"] += [(t["name"], t["ns"]) for t in entry["timestamps"]]
        else:
            trace.update(entry)
    return found


def test_sampled_requests_are_written_as_tritons_trace_records(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    repo = tmp_path / "repo"
    for name in ("add_sub", "other"):
        make_add_sub(repo, name)
    trace = tmp_path / "trace.json"
    server = start_serve(
        repo, "--trace-config", f"triton,file={trace}", "--trace-config", "level=TIMESTAMPS",
        "--trace-config", "rate=2", "--trace-config", "triton,log-frequency=2",
    )  # fmt: skip
    client = httpclient.InferenceServerClient(server.hostport)
    _infer(client, "add_sub", 4, "a")  # the 2nd and 4th sampled: one file of two
    first = _traces(_written(Path(f"{trace}.0")))
    assert [t["request_id"] for t in first.values()] == ["a1", "a3"]
    for record in first.values():
        assert (record["model_name"], record["model_version"]) == ("add_sub", 1)
        names = [name for name, _ in record["activities"]]
        assert names[:2] == _HTTP_BEFORE and names[-2:] == _HTTP_AFTER, names
        # the response completes around the request's end: either may come first
        assert [n for n in names if n in _ACTIVITIES] == _ACTIVITIES, names
        assert "INFER_RESPONSE_COMPLETE" in names and len(names) == 12, names
        stamps = [ns for _, ns in record["activities"]]
        assert stamps == sorted(stamps), record  # in the order they happened
    # A model's own setting: every request of `other`, at most 3, written when all are in.
    own = {"trace_rate": "1", "trace_count": "3", "log_frequency": "0"}
    client.update_trace_settings("other", own)
    _infer(client, "other", 5, "o")
    other = _traces(_written(Path(f"{trace}.1")))
    assert [t["request_id"] for t in other.values()] == ["o0", "o1", "o2"]
    client.update_trace_settings(settings={"trace_level": ["OFF"]})
    _infer(client, "add_sub", 4, "off")
    server.stop()
    assert not Path(f"{trace}.2").exists()  # nothing sampled while OFF
    assert not trace.exists()  # every record went to an indexed file (log_frequency 2)


def test_without_log_frequency_records_reach_the_file_at_shutdown(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    repo = tmp_path / "repo"
    make_add_sub(repo)
    trace = tmp_path / "trace.json"
    server = start_serve(
        repo, "--trace-config", f"triton,file={trace}", "--trace-config", "level=TIMESTAMPS",
        "--trace-config", "rate=1",
    )  # fmt: skip
    client = httpclient.InferenceServerClient(server.hostport)
    _infer(client, "add_sub", 3, "s")
    assert not trace.exists()  # Triton's log_frequency 0: written when the server stops
    server.stop()
    assert [t["request_id"] for t in _traces(trace).values()] == ["s0", "s1", "s2"]


def test_restricted_logging_and_trace_need_their_header(
    tmp_path: Path, start_serve: Callable[..., ServeProcess]
) -> None:
    make_add_sub(tmp_path)
    server = start_serve(
        tmp_path, "--grpc-port", "0", "--http-restricted-api=logging,trace:admin=yes",
        "--grpc-restricted-protocol=logging,trace:admin=yes",
    )  # fmt: skip
    http = httpclient.InferenceServerClient(server.hostport)
    for call in (http.get_log_settings, http.get_trace_settings):
        with pytest.raises(InferenceServerException, match="expecting header 'admin'"):
            call()
    assert http.get_log_settings(headers={"admin": "yes"})["log_info"] is True
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        with pytest.raises(InferenceServerException, match="triton-grpc-protocol-admin") as info:
            client.get_trace_settings()
        assert info.value.status() == str(grpc.StatusCode.UNAVAILABLE)
        settings = client.get_log_settings(headers={"triton-grpc-protocol-admin": "yes"})
        assert settings.settings["log_info"].bool_param is True
