"""The soak's requests: good ones through tritonclient (HTTP JSON, HTTP binary, gRPC) with
their answers checked, and hostile ones on raw sockets, each turned into an `Outcome`.

Each function sends one request and never raises for what the server does: a timeout is
`hung`, a connection closed or reset before an answer is `lost` (good) or `refused` (hostile),
a non-200 answer to a good request is `error`, a 200 with the wrong numbers is `wrong`.
"""

from __future__ import annotations

import json
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

__all__ = [
    "HOSTILE_CASES",
    "MODELS",
    "GoodResult",
    "ModelSpec",
    "grpc_infer",
    "hostile",
    "http_infer",
]


@dataclass(frozen=True)
class ModelSpec:
    """A soak model: its inputs (name, shape), outputs and the expected answer."""

    name: str
    builder: str  # a builder of tests.fixtures.models, onnx_models or torch_models
    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    outputs: tuple[str, ...]
    answer: Callable[[list[np.ndarray]], list[np.ndarray]]
    warm: bool  # kept warm by steady traffic (else woken from zero by bursts)


MODELS = (
    ModelSpec(
        "hot_add_sub",
        "make_add_sub",
        (("INPUT0", (4,)), ("INPUT1", (4,))),
        ("OUTPUT0", "OUTPUT1"),
        lambda x: [x[0] + x[1], x[0] - x[1]],
        warm=True,
    ),
    ModelSpec(
        "hot_identity",
        "make_identity_fp32",
        (("INPUT0", (1, 16)),),
        ("OUTPUT0",),
        lambda x: [x[0]],
        warm=True,
    ),
    ModelSpec(
        "wake_add",
        "make_onnx_a_plus_b",
        (("A", (4,)), ("B", (4,))),
        ("C",),
        lambda x: [x[0] + x[1]],
        warm=False,
    ),
    ModelSpec(
        "wake_identity",
        "make_python_identity",
        (("INPUT0", (8,)),),
        ("OUTPUT0",),
        lambda x: [x[0]],
        warm=False,
    ),
    ModelSpec(
        "wake_torch",
        "make_torchscript_add",
        (("INPUT__0", (4,)), ("INPUT__1", (4,))),
        ("OUTPUT__0", "OUTPUT__1"),
        lambda x: [x[0] + x[1], x[0] - x[1]],
        warm=False,
    ),
)


@dataclass(frozen=True)
class GoodResult:
    result: str  # ok | error | wrong | lost | hung
    latency_s: float
    detail: str = ""


def _inputs(spec: ModelSpec, rng: random.Random) -> list[np.ndarray]:
    return [
        np.array([rng.uniform(-100, 100) for _ in range(int(np.prod(shape)))], np.float32).reshape(
            shape
        )
        for _, shape in spec.inputs
    ]


def _compare(spec: ModelSpec, x: list[np.ndarray], got: list[np.ndarray | None]) -> str:
    for name, want, have in zip(spec.outputs, spec.answer(x), got, strict=True):
        if have is None or have.shape != want.shape or not np.allclose(have, want, atol=1e-4):
            return f"{name}: {have!r} != {want!r}"
    return ""


def _classify(exc: BaseException, elapsed: float, timeout_s: float) -> GoodResult:
    text = f"{type(exc).__name__}: {exc}"[:300]
    if elapsed >= 0.9 * timeout_s or "DEADLINE_EXCEEDED" in text or "timed out" in text.lower():
        return GoodResult("hung", elapsed, text)
    if isinstance(exc, InferenceServerException) and exc.status() not in (None, "", "None"):
        status = str(exc.status())
        if "UNAVAILABLE" not in status:
            return GoodResult("error", elapsed, text)
    return GoodResult("lost", elapsed, text)


def http_infer(
    client: httpclient.InferenceServerClient,
    spec: ModelSpec,
    rng: random.Random,
    *,
    binary: bool,
    timeout_s: float,
) -> GoodResult:
    """One good v2 HTTP request (JSON tensors, or Triton's binary extension)."""
    x = _inputs(spec, rng)
    inputs = []
    for (name, shape), value in zip(spec.inputs, x, strict=True):
        tensor = httpclient.InferInput(name, list(shape), "FP32")
        tensor.set_data_from_numpy(value, binary_data=binary)
        inputs.append(tensor)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in spec.outputs]
    start = time.perf_counter()
    try:
        answer = client.infer(spec.name, inputs, outputs=outputs)
    except (InferenceServerException, OSError, TimeoutError) as exc:
        return _classify(exc, time.perf_counter() - start, timeout_s)
    elapsed = time.perf_counter() - start
    wrong = _compare(spec, x, [answer.as_numpy(n) for n in spec.outputs])
    return GoodResult("wrong" if wrong else "ok", elapsed, wrong)


def grpc_infer(
    client: grpcclient.InferenceServerClient,
    spec: ModelSpec,
    rng: random.Random,
    *,
    timeout_s: float,
) -> GoodResult:
    """One good KServe v2 gRPC `ModelInfer`."""
    x = _inputs(spec, rng)
    inputs = []
    for (name, shape), value in zip(spec.inputs, x, strict=True):
        tensor = grpcclient.InferInput(name, list(shape), "FP32")
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    outputs = [grpcclient.InferRequestedOutput(n) for n in spec.outputs]
    start = time.perf_counter()
    try:
        answer = client.infer(spec.name, inputs, outputs=outputs, client_timeout=timeout_s)
    except (InferenceServerException, OSError) as exc:
        return _classify(exc, time.perf_counter() - start, timeout_s)
    elapsed = time.perf_counter() - start
    wrong = _compare(spec, x, [answer.as_numpy(n) for n in spec.outputs])
    return GoodResult("wrong" if wrong else "ok", elapsed, wrong)


# ---- hostile requests ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Hostile:
    """What a hostile case sends, and whether the client then waits for an answer (a 4xx or
    a close) or walks away on purpose after `linger_s`."""

    payload: bytes
    expect_answer: bool
    linger_s: float = 0.0
    grpc_port: bool = False


def _head(path: str, headers: dict[str, str], body: bytes, *, length: int | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines.append(f"Content-Length: {len(body) if length is None else length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _json(model: str, body: bytes) -> bytes:
    return _head(f"/v2/models/{model}/infer", {"Content-Type": "application/json"}, body)


def _binary(model: str, declared: int, sent: int, header_extra: int = 0) -> bytes:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [declared // 4],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": declared},
                }
            ]
        }
    ).encode()
    body = header + b"\0" * sent
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header) + header_extra),
    }
    return _head(f"/v2/models/{model}/infer", headers, body)


def _good_json(model: str) -> bytes:
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
            {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 1, 1, 1]},
        ]
    }
    return _json(model, json.dumps(body).encode())


HOSTILE_CASES: dict[str, Callable[[str], Hostile]] = {
    "malformed_json": lambda m: Hostile(_json(m, b'{"inputs": [{"name": "INPUT0", "sha'), True),
    "json_not_object": lambda m: Hostile(_json(m, b"[1, 2, 3]"), True),
    "json_shape_mismatch": lambda m: Hostile(
        _json(
            m, b'{"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2]}]}'
        ),
        True,
    ),
    "binary_size_short": lambda m: Hostile(_binary(m, declared=64, sent=16), True),
    "binary_header_length_past_body": lambda m: Hostile(
        _binary(m, declared=16, sent=16, header_extra=4096), True
    ),
    "unknown_model": lambda m: Hostile(_json(f"no_such_{m}", b'{"inputs": []}'), True),
    "oversized_header": lambda m: Hostile(
        _head(f"/v2/models/{m}/infer", {"X-Filler": "a" * 100_000}, b"{}"), True
    ),
    "too_many_headers": lambda m: Hostile(
        _head(f"/v2/models/{m}/infer", {f"X-H{i}": "v" for i in range(1000)}, b"{}"), True
    ),
    "garbage_request_line": lambda m: Hostile(b"\x16\x03\x01\x02\x00 garbage\r\n\r\n", True),
    "declared_body_over_limit": lambda m: Hostile(
        _head(f"/v2/models/{m}/infer", {"Content-Type": "application/json"}, b"", length=1 << 40),
        True,
    ),
    "slow_partial_head_abandoned": lambda m: Hostile(
        f"POST /v2/models/{m}/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty".encode(),
        False,
        linger_s=1.5,
    ),
    "partial_body_abandoned": lambda m: Hostile(
        _head(
            f"/v2/models/{m}/infer",
            {"Content-Type": "application/json"},
            b'{"inputs": [',
            length=4096,
        ),
        False,
        linger_s=1.0,
    ),
    "dropped_mid_request": lambda m: Hostile(_good_json(m), False),
    "grpc_port_garbage": lambda m: Hostile(
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", True, grpc_port=True
    ),
}


def _read_status(sock: socket.socket) -> str:
    """The status code of the first response on `sock`, or `closed` if the server closed
    (or reset) it without one. Raises TimeoutError when nothing comes in time."""
    data = b""
    while b"\r\n" not in data:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return "closed"
        if not chunk:
            return "closed" if not data.startswith(b"HTTP/") else "truncated"
        data += chunk
        if not data.startswith(b"HTTP/"[: len(data)]):
            return "closed"  # not HTTP/1.1 (the gRPC port answers HTTP/2 frames, then closes)
    return data.split(b" ", 2)[1].decode(errors="replace")


def hostile(
    case: str, model: str, host: str, port: int, grpc_port: int, timeout_s: float
) -> tuple[str, float, str]:
    """Send one hostile case; (result, seconds, detail). Results: refused, abandoned,
    accepted, server_error or hung."""
    spec = HOSTILE_CASES[case](model)
    start = time.perf_counter()
    try:
        with socket.create_connection(
            (host, grpc_port if spec.grpc_port else port), timeout_s
        ) as sock:
            sock.settimeout(timeout_s)
            try:
                sock.sendall(spec.payload)
            except (BrokenPipeError, ConnectionResetError):
                return "refused", time.perf_counter() - start, "closed while sending"
            if not spec.expect_answer:
                time.sleep(spec.linger_s)
                return "abandoned", time.perf_counter() - start, ""
            if spec.grpc_port:  # an HTTP/2 server answers HTTP/1.1 with a GOAWAY, then closes
                while sock.recv(65536):
                    pass
                return "refused", time.perf_counter() - start, "closed"
            status = _read_status(sock)
    except TimeoutError:
        return "hung", time.perf_counter() - start, "no answer"
    except ConnectionResetError:
        return "refused", time.perf_counter() - start, "reset"
    elapsed = time.perf_counter() - start
    if status in ("closed",) or status.startswith("4"):
        return "refused", elapsed, status
    if status.startswith("2"):
        return "accepted", elapsed, status
    return "server_error", elapsed, status
