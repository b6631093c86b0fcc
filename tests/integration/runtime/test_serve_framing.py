"""`thaw serve` and ambiguous request framing (raw sockets): CL+TE, duplicate or conflicting
Content-Length, obsolete line folding, bare LF, bad chunk sizes and extensions are each
answered 400 in JSON and the connection closed, and the request hidden in them never runs."""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.fixtures.serve_process import ServeProcess
from tests.support.framing_cases import (
    bad_framing,
    coded_request,
    infer_request,
    length_beside_chunked,
    read_answers,
)

pytestmark = pytest.mark.integration

PATH = "/v2/models/add_sub/infer"
BODY = json.dumps(
    {
        "inputs": [
            {"name": n, "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}
            for n in ("INPUT0", "INPUT1")
        ]
    }
).encode()
SMUGGLED = infer_request(PATH, BODY)
CASES = bad_framing(PATH, SMUGGLED)


def _executed(server: ServeProcess) -> int:
    """Requests add_sub has run, successful or not."""
    with urllib.request.urlopen(server.url + "/v2/models/add_sub/stats", timeout=10) as r:
        stats = json.loads(r.read())["model_stats"][0]["inference_stats"]
    return int(stats["success"]["count"]) + int(stats["fail"]["count"])


@pytest.mark.parametrize("name", sorted(CASES))
def test_ambiguous_framing_is_400_closed_and_runs_nothing(
    runtime_server: ServeProcess, name: str
) -> None:
    host, port = runtime_server.hostport.rsplit(":", 1)
    before = _executed(runtime_server)
    statuses, data = read_answers(host, int(port), CASES[name])
    assert statuses == ["400"], data[:300]
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"application/json" in head
    assert set(json.loads(body)) == {"error"}
    assert _executed(runtime_server) == before  # neither the request nor the smuggled one ran


def test_pipelined_requests_are_each_answered_once(runtime_server: ServeProcess) -> None:
    host, port = runtime_server.hostport.rsplit(":", 1)
    before = _executed(runtime_server)
    raw = infer_request(PATH, BODY) + infer_request(PATH, BODY, chunked=True)
    raw += infer_request(PATH, BODY, close=True)
    statuses, _ = read_answers(host, int(port), raw)
    assert statuses == ["200", "200", "200"]
    assert _executed(runtime_server) == before + 3


@pytest.mark.parametrize("codings", ["gzip", "deflate", "x-unknown;q=1"])
def test_an_unimplemented_transfer_coding_is_501_and_the_connection_goes_on(
    runtime_server: ServeProcess, codings: str
) -> None:
    host, port = runtime_server.hostport.rsplit(":", 1)
    before = _executed(runtime_server)
    raw = coded_request(PATH, BODY, codings) + infer_request(PATH, BODY, close=True)
    statuses, data = read_answers(host, int(port), raw)
    assert statuses == ["501", "200"], data[:300]
    body = data.partition(b"\r\n\r\n")[2].split(b"HTTP/1.1", 1)[0]
    assert "not implemented" in json.loads(body)["error"]
    assert _executed(runtime_server) == before + 1  # only the well-coded request ran


def test_a_length_beside_chunked_is_framed_by_chunked_and_the_connection_closed(
    runtime_server: ServeProcess,
) -> None:
    # As Triton answers it (L0_http test_content_encoding_chunked_manually). Bytes after it on
    # the connection are refused with it (the cl-and-te case above).
    host, port = runtime_server.hostport.rsplit(":", 1)
    before = _executed(runtime_server)
    raw = length_beside_chunked(PATH, BODY)
    statuses, data = read_answers(host, int(port), raw)
    assert statuses == ["200"], data[:300]  # then closed (read_answers reads to the close)
    assert b"Connection: close" in data.partition(b"\r\n\r\n")[0]
    assert _executed(runtime_server) == before + 1
