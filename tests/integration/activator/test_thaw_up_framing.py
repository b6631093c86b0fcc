"""`thaw up` and a replica behind it agree on where every request ends (real processes, raw
sockets). Each ambiguous framing (CL+TE, duplicate Content-Length, folding, bare LF, bad chunk
sizes and extensions) is answered 400 and closed, whether the activator parses it (a model
served in-path) or the replica does (a connection handed off to it), and the request hidden in
it never reaches the replica; well-framed pipelined requests each run exactly once, also when a
handed-off connection's requests go back through the activator to another model."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator

import pytest

from tests.fixtures.models import make_add_sub
from tests.fixtures.up_process import UpProcess, with_params
from tests.support.framing_cases import (
    bad_framing,
    coded_request,
    infer_request,
    length_beside_chunked,
    read_answers,
)

pytestmark = pytest.mark.integration

BODY = json.dumps(
    {
        "inputs": [
            {"name": n, "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}
            for n in ("INPUT0", "INPUT1")
        ]
    }
).encode()
DIRECT, INPATH = "add_sub", "inpath"  # handed off to its replica / proxied by the activator


def _path(model: str) -> str:
    return f"/v2/models/{model}/infer"


CASES = bad_framing(_path(DIRECT), b"")  # only the names here; built per model below


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("framing_repo")
    make_add_sub(repo, DIRECT)
    with_params(make_add_sub(repo, INPATH), direct_connections="false")
    server = UpProcess(repo, "--warm-pool", "0", "--no-image-build")
    try:
        for model in (DIRECT, INPATH):
            statuses, data = read_answers(*_hostport(server), infer_request(
                _path(model), BODY, close=True
            ))  # fmt: skip
            assert statuses == ["200"], data[:300]
            server.wait_for(lambda m=model: server.model(m)["state"] == "warm", 30, "warm")
        yield server
    finally:
        assert server.stop() == 0, server.log()


def _hostport(up: UpProcess) -> tuple[str, int]:
    host, port = up.hostport.rsplit(":", 1)
    return host, int(port)


def _executed(up: UpProcess, model: str) -> int:
    """Requests the model's replica itself has run (its own statistics, not the activator's)."""
    (replica,) = up.model(model)["replicas"]
    with urllib.request.urlopen(f"{replica['url']}/v2/models/{model}/stats", timeout=10) as r:
        stats = json.loads(r.read())["model_stats"][0]["inference_stats"]
    return int(stats["success"]["count"]) + int(stats["fail"]["count"])


def _handoffs(up: UpProcess, model: str, result: str) -> float:
    pattern = rf'thaw_handoffs_total{{model="{model}",result="{result}"}} (\S+)'
    match = re.search(pattern, up.metrics())
    return float(match.group(1)) if match else 0.0


@pytest.mark.parametrize("model", [DIRECT, INPATH])
@pytest.mark.parametrize("name", sorted(CASES))
def test_ambiguous_framing_is_400_closed_and_nothing_reaches_the_replica(
    up: UpProcess, model: str, name: str
) -> None:
    raw = bad_framing(_path(model), infer_request(_path(model), BODY))[name]
    result = "handed_off" if model == DIRECT else "disabled"
    executed, routed = _executed(up, model), _handoffs(up, model, result)
    statuses, data = read_answers(*_hostport(up), raw)
    assert statuses == ["400"], data[:300]  # one answer, then the connection closed
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"application/json" in head
    assert set(json.loads(body)) == {"error"}
    assert _executed(up, model) == executed
    assert _handoffs(up, model, result) == routed + 1  # the path this case meant to test


@pytest.mark.parametrize("model", [DIRECT, INPATH])
def test_pipelined_requests_each_reach_the_replica_once(up: UpProcess, model: str) -> None:
    executed = _executed(up, model)
    raw = infer_request(_path(model), BODY) + infer_request(_path(model), BODY, chunked=True)
    raw += infer_request(_path(model), BODY, close=True)
    statuses, _ = read_answers(*_hostport(up), raw)
    assert statuses == ["200", "200", "200"]
    assert _executed(up, model) == executed + 3


def test_a_handed_off_connection_frames_requests_it_sends_back_through_the_activator(
    up: UpProcess,
) -> None:
    direct, inpath = _executed(up, DIRECT), _executed(up, INPATH)
    handed_off = _handoffs(up, DIRECT, "handed_off")
    raw = infer_request(_path(DIRECT), BODY) + infer_request(_path(INPATH), BODY, chunked=True)
    raw += infer_request(_path(INPATH), BODY) + infer_request(_path(DIRECT), BODY, close=True)
    statuses, _ = read_answers(*_hostport(up), raw)
    assert statuses == ["200"] * 4
    assert _handoffs(up, DIRECT, "handed_off") == handed_off + 1
    assert (_executed(up, DIRECT), _executed(up, INPATH)) == (direct + 2, inpath + 2)


@pytest.mark.parametrize("model", [DIRECT, INPATH])
def test_an_unimplemented_transfer_coding_is_501_and_never_reaches_the_replica_compressed(
    up: UpProcess, model: str
) -> None:
    executed = _executed(up, model)
    raw = coded_request(_path(model), BODY, "gzip") + infer_request(_path(model), BODY, close=True)
    statuses, data = read_answers(*_hostport(up), raw)
    assert statuses == ["501", "200"], data[:300]
    body = data.partition(b"\r\n\r\n")[2].split(b"HTTP/1.1", 1)[0]
    assert "not implemented" in json.loads(body)["error"]
    assert _executed(up, model) == executed + 1


@pytest.mark.parametrize("model", [DIRECT, INPATH])
def test_a_length_beside_chunked_is_framed_by_chunked_and_the_connection_closed(
    up: UpProcess, model: str
) -> None:
    executed = _executed(up, model)
    raw = length_beside_chunked(_path(model), BODY)
    statuses, data = read_answers(*_hostport(up), raw)
    assert statuses == ["200"], data[:300]  # then closed (read_answers reads to the close)
    assert b"Connection: close" in data.partition(b"\r\n\r\n")[0]
    assert _executed(up, model) == executed + 1
