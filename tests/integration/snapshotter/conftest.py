"""Integration fixtures: a moto S3 server on 127.0.0.1, a fault-injecting proxy in front of it,
and tiny real models (ONNX, TorchScript) in a Triton-style repository."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import ClientSession, web

BUCKET = "thaw-images"
SLOWDOWN_XML = b"<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>"
DROP_HEADERS = ("content-length", "transfer-encoding", "connection", "server", "date")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """A real moto S3 server subprocess on 127.0.0.1 (killed at the end of the session)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/moto-api/", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Faults:
    """What the proxy does to the next matching GETs of chunk objects."""

    mode: str = "none"  # none | slowdown | reset | stall | truncate
    remaining: int = 0  # requests still to fault; -1: every one
    stall_s: float = 30.0
    chunk_gets: int = 0
    faulted: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, mode: str, count: int = -1) -> None:
        with self.lock:
            self.mode, self.remaining, self.faulted = mode, count, 0

    def take(self, path: str, method: str) -> str:
        with self.lock:
            if "/chunks/" not in path or method != "GET":
                return "none"
            self.chunk_gets += 1
            if self.mode == "none" or self.remaining == 0:
                return "none"
            self.remaining -= 1 if self.remaining > 0 else 0
            self.faulted += 1
            return self.mode


class FaultProxy:
    """An aiohttp reverse proxy (own thread + loop) between boto3 and moto that injects faults."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.faults = Faults()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        self._session = ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        for task in asyncio.all_tasks():  # stalled handlers still sleeping
            if task is not asyncio.current_task():
                task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        fault = self.faults.take(request.path, request.method)
        if fault == "slowdown":
            body = SLOWDOWN_XML
            return web.Response(status=503, body=body, content_type="application/xml")
        assert self._session is not None
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")
        }
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=await request.read(),
        ) as upstream:
            body = await upstream.read()
            out_headers = {
                k: v for k, v in upstream.headers.items() if k.lower() not in DROP_HEADERS
            }
            if request.method == "HEAD" and "Content-Length" in upstream.headers:
                out_headers["Content-Length"] = upstream.headers["Content-Length"]
        return await self._respond(request, fault, upstream.status, out_headers, body)

    async def _respond(
        self, request: web.Request, fault: str, status: int, headers: dict[str, str], body: bytes
    ) -> web.StreamResponse:
        if fault == "truncate":
            body = body[: len(body) // 2]
        if fault in ("reset", "stall"):
            response = web.StreamResponse(status=status, headers=headers)
            response.content_length = len(body)
            await response.prepare(request)
            await response.write(body[: len(body) // 2])
            if fault == "stall":
                await asyncio.sleep(self.faults.stall_s)
            assert request.transport is not None
            request.transport.abort()
            return response
        return web.Response(status=status, headers=headers, body=body)


@pytest.fixture(scope="session")
def fault_proxy(moto_url: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(moto_url)
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
def s3_env(fault_proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """boto3's standard environment pointing at the proxy; a fresh bucket prefix per test."""
    env = {
        "AWS_ENDPOINT_URL_S3": fault_proxy.url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    import boto3

    client = boto3.client("s3", endpoint_url=fault_proxy.url)
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=BUCKET)
    fault_proxy.faults.set("none", 0)
    return env


@pytest.fixture(scope="session")
def model_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`<repo>/mlp_onnx/1/model.onnx` and `<repo>/mlp_torchscript/1/model.pt`, random weights,
    each a few hundred KiB so images have several 4 KiB-aligned tensors and ranged GETs."""
    import torch

    repo = tmp_path_factory.mktemp("repo")
    torch.manual_seed(0)
    module = make_mlp().eval()  # type: ignore[attr-defined]
    (repo / "mlp_torchscript" / "1").mkdir(parents=True)
    torch.jit.save(torch.jit.script(module), str(repo / "mlp_torchscript" / "1" / "model.pt"))
    (repo / "mlp_onnx" / "1").mkdir(parents=True)
    torch.onnx.export(
        module, (torch.randn(2, 64),), str(repo / "mlp_onnx" / "1" / "model.onnx"),
        input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b"}}, dynamo=False,
    )  # fmt: skip
    return repo


def _mlp_class() -> type:
    import torch

    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1 = torch.nn.Linear(64, 512)
            self.norm = torch.nn.LayerNorm(512)
            self.l2 = torch.nn.Linear(512, 256)
            self.bn = torch.nn.BatchNorm1d(256)
            self.l3 = torch.nn.Linear(256, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.l3(torch.relu(self.bn(self.l2(torch.relu(self.norm(self.l1(x)))))))

    return Mlp


def make_mlp() -> object:
    module = _mlp_class()()
    import torch

    with torch.no_grad():
        module.bn.running_mean.uniform_(-1, 1)  # type: ignore[attr-defined]
        module.bn.running_var.uniform_(0.5, 2)  # type: ignore[attr-defined]
    return module
