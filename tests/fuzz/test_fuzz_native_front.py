"""Differential fuzz of the native front (decision 0032): the same hostile bytes to `thaw serve`
with its Python front and with `--front native`, over loopback.

Each example takes a valid request (a health check, metadata, a JSON infer by length or in
chunks, a binary-tensor infer) and mangles its bytes (inserted, deleted, replaced or repeated
bytes; header names' case; stray CR or LF), then sends the result to both servers and reads the
first answer of each. Property: what the Python front refuses (4xx, or a connection closed
unanswered) the native front refuses too, never answering it 2xx (unless the refusal was of a
later message in the same bytes, which aiohttp parses before answering the first); the native
front never answers 5xx, its error answers are JSON `{"error": ...}`, neither server hangs (each
read has a timeout, each example the harness's deadline), and both serve a normal request
afterwards. The native front may be the stricter: hyper refuses some bytes llhttp lets through
(two spaces after the method), and which parser refused in what words differs, so statuses
within a class and error texts are not compared.

Budget: the harness's (150 examples in CI, 5,000 in the `slow` run). Skipped where the front is
not built (`make native`).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import strategies as st

from runtime.errors import ServingError
from runtime.process.native_front import front_binary
from tests.fixtures.models import make_add_sub
from tests.fixtures.serve_process import ServeProcess, both_fronts
from tests.fuzz.targets import DEADLINE_MS, fuzz_target

pytestmark = pytest.mark.integration

TIMEOUT_S = 10.0
FLAGS = (
    "--allow-grpc=false",
    "--allow-metrics=false",
    "--body-timeout-s",
    "1",
    "--head-timeout-s",
    "1",
)
_INFER = json.dumps(
    {"inputs": [{"name": f"INPUT{i}", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}
                for i in (0, 1)]}
).encode()  # fmt: skip
_BINARY_HEADER = json.dumps(
    {"inputs": [{"name": f"INPUT{i}", "datatype": "FP32", "shape": [4],
                 "parameters": {"binary_data_size": 16}} for i in (0, 1)]}
).encode()  # fmt: skip


def _request(
    method: str, path: str, body: bytes = b"", *headers: str, chunked: bool = False
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: x", "Connection: close", *headers]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        body = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (body[:7], body[7:]))
        body += b"0\r\n\r\n"
    elif body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


BASES = [
    _request("GET", "/v2/health/ready"),
    _request("GET", "/v2/models/add_sub"),
    _request("POST", "/v2/models/add_sub/infer", _INFER, "Content-Type: application/json"),
    _request("POST", "/v2/models/add_sub/infer", _INFER, chunked=True),
    _request(
        "POST",
        "/v2/models/add_sub/infer",
        _BINARY_HEADER + bytes(32),
        f"Inference-Header-Content-Length: {len(_BINARY_HEADER)}",
    ),
]


@st.composite
def mangled(draw: st.DrawFn) -> bytes:
    """A base request with a few of its bytes mangled."""
    data = bytearray(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        at = draw(st.integers(min_value=0, max_value=len(data) - 1))
        edit = draw(st.sampled_from(["insert", "delete", "replace", "repeat", "case", "crlf"]))
        if edit == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif edit == "delete":
            del data[at : at + draw(st.integers(min_value=1, max_value=8))]
        elif edit == "replace":
            data[at] = draw(st.integers(min_value=0, max_value=255))
        elif edit == "repeat":
            data[at:at] = data[at : at + draw(st.integers(min_value=1, max_value=24))]
        elif edit == "case":
            data[at : at + 8] = bytes(data[at : at + 8]).swapcase()
        else:
            data[at:at] = draw(st.sampled_from([b"\r", b"\n", b"\r\n", b"\r\n\r\n"]))
        if not data:
            data = bytearray(b"\r\n")
    return bytes(data)


def _first_message(request: bytes) -> bytes | None:
    """The first message of `request` when more bytes follow it: its head and the body its one
    Content-Length or its chunks give; None when there is no such split."""
    end = request.find(b"\r\n\r\n")
    if end < 0:
        return None
    if b"transfer-encoding" in request[:end].lower():  # to its last chunk, no trailers
        last = request.find(b"\r\n0\r\n\r\n", end + 2)
        first = request[: last + 7] if last >= 0 else request
    else:
        lengths = re.findall(rb"(?im)^content-length:[ \t]*([0-9]+)[ \t]*\r?$", request[:end])
        first = request[: end + 4 + (int(lengths[0]) if len(lengths) == 1 else 0)]
    return first if len(first) < len(request) else None


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0  # every answer of both servers has one, or is chunked (read to its last chunk)


def _first_answer(hostport: str, request: bytes) -> tuple[int | None, bytes]:
    """The status and body of the first answer to `request`, or (None, b"") when the
    connection closed with none."""
    host, port = hostport.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        with contextlib.suppress(OSError):  # refused part-way: its answer is still read
            sock.sendall(request)
        data = b""
        try:
            while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1."):
                return None, b""
            chunked = b"transfer-encoding: chunked" in head.lower()
            length = _content_length(head)
            while (body.endswith(b"0\r\n\r\n") is False if chunked else len(body) < length) and (
                chunk := sock.recv(65536)
            ):
                body += chunk
        except ConnectionResetError:
            return (int(data[9:12]), b"") if data.startswith(b"HTTP/1.") else (None, b"")
    return int(head[9:12]), body if chunked else body[:length]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServeProcess]]:
    try:
        front_binary()
    except ServingError:
        pytest.skip("the native front is not built (make native)")
    repo: Path = tmp_path_factory.mktemp("fuzz_native_front")
    make_add_sub(repo)
    # A body shorter than its length is answered 408 in a second, not the default minute.
    with both_fronts(repo, *FLAGS) as started:
        yield started


def _class(status: int | None) -> str:
    return "none" if status is None else f"{status // 100}xx"


@fuzz_target(mangled(), deadline_ms=DEADLINE_MS * 10)  # four round trips on a loaded machine
def _differential(servers: dict[str, ServeProcess], request: bytes) -> None:
    python_status, _ = _first_answer(servers["python"].hostport, request)
    native_status, native_body = _first_answer(servers["native"].hostport, request)
    # Never more lenient: what the Python front refuses (or drops), the native one refuses,
    # unless the Python front refused a later message with the first (aiohttp parses all the
    # bytes at hand before answering): then the first message's head alone is answered 2xx.
    if _class(python_status) in ("4xx", "none") and _class(native_status) == "2xx":
        first = _first_message(request)
        alone, _ = _first_answer(servers["python"].hostport, first) if first else (None, b"")
        assert _class(alone) == "2xx", (python_status, native_status, alone)
    assert native_status is None or native_status < 500, native_body[:300]
    if native_status is not None and native_status >= 400 and native_body:
        assert list(json.loads(native_body)) == ["error"], native_body[:300]
    for server in servers.values():
        status, body = _first_answer(server.hostport, BASES[2])
        assert status == 200 and json.loads(body)["outputs"], (status, body[:300])


test_both_fronts_answer_mangled_bytes_alike, test_both_fronts_answer_mangled_bytes_alike_long = (
    _differential
)
