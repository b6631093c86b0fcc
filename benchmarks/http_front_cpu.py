"""The CPU one HTTP infer costs `thaw serve`'s event loop, without a network, by layers.

    python benchmarks/http_front_cpu.py [--requests 3000] [--rounds 3] [--profile OUT]
        [--tree DIR]

`--tree DIR` measures another checkout's server (a base revision: `git archive REV | tar -x -C
DIR`); run it and this checkout alternately for a before/after.

Raw request bytes (the add_sub request of benchmarks.workloads, JSON or binary tensors) go
straight into the server's own aiohttp protocol, under its ConnectionGuard, and the answer comes
out of a fake transport: the whole request path of `thaw serve` (parse, guard, middlewares,
routing, handler, codecs, ModelManager, scheduler, the model, response write), one request at a
time, with no socket, no client and no other process in the measured thread. What it reports
is `time.thread_time` per request, so a busy machine stretches it far less than it stretches
serve_throughput.py's numbers. The layers, each measured in the same run:

- `aiohttp`: a bare aiohttp app (one route, read the body, answer a fixed body): the floor any
  aiohttp server pays (parser, request and response objects, the write).
- `front`: Thaw's app with the ModelManager's `infer` answering a fixed response: the HTTP
  front and the codecs (guard, middlewares, handler, decode, encode), no scheduler, no model.
- `in_process` / `process`: the real ModelManager with add_sub run in process or in its stub
  (the stub's wake-ups included: one request at a time is concurrency 1).

`--profile OUT` also writes a cProfile (clock: thread_time) of the `front` layer's rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import uvloop
from aiohttp import web

from benchmarks.load_client import Payload
from benchmarks.machine import machine_line
from benchmarks.workloads import add_sub_workload, write_add_sub

LAYERS = ("aiohttp", "front", "in_process", "process")
_FIXED_BODY = b'{"model_name":"add_sub","model_version":"1","outputs":[]}'
_WARMUP = 300


class _Transport(asyncio.Transport):
    """Takes what the server writes; `answered` resolves at the first write of an answer."""

    def __init__(self) -> None:
        super().__init__()
        self.answered: asyncio.Future[None] | None = None
        self.written: list[bytes] = []
        self._closing = False

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))
        if self.answered is not None and not self.answered.done():
            self.answered.set_result(None)

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8000)}.get(
            name, default
        )

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_reading(self) -> bool:
        return True

    def can_write_eof(self) -> bool:
        return True


def raw_request(payload: Payload) -> bytes:
    """The payload as the bytes aiohttp's client sends (its default headers included)."""
    headers = {
        "Host": "127.0.0.1",
        **payload.headers,
        "Content-Length": str(len(payload.body)),
        "Accept": "*/*",
        "Accept-Encoding": "gzip, deflate",
        "User-Agent": "Python/3.11 aiohttp/3",
    }
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"POST {payload.path} HTTP/1.1\r\n{head}\r\n".encode() + payload.body


Driver = Callable[[], Awaitable[None]]


def _driver(protocol: asyncio.Protocol, request: bytes) -> tuple[Driver, _Transport]:
    """One request in, its answer out (and aiohttp's end of the request run)."""
    transport = _Transport()
    protocol.connection_made(transport)
    loop = asyncio.get_running_loop()

    async def one() -> None:
        transport.answered = loop.create_future()
        transport.written.clear()
        protocol.data_received(request)
        await transport.answered
        await asyncio.sleep(0)  # the handler task's end: keep-alive, the next read

    return one, transport


async def _bare(request: bytes) -> tuple[Driver, Callable[[], Awaitable[None]]]:
    async def infer(req: web.Request) -> web.Response:
        await req.read()
        return web.Response(body=_FIXED_BODY, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v2/models/{model}/infer", infer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    assert runner.server is not None
    one, _ = _driver(runner.server(), request)
    return one, runner.cleanup


async def _thaw(
    repo: Path, request: bytes, *, fixed_answer: bool
) -> tuple[Driver, Callable[[], Awaitable[None]]]:
    """`thaw serve REPO`'s app and manager, as runtime.process.cli builds them (no gRPC)."""
    import thaw.cli
    from runtime.http.app import CONNECTIONS, RUNNER_OPTIONS, build_app
    from runtime.inference import InferRequest, InferResponse, InferTensor
    from runtime.models.manager import ModelManager
    from runtime.observe.metrics import Metrics
    from runtime.observe.tracing import RequestTracer
    from runtime.process import cli as serve_cli
    from thawwire.trace_settings import TraceSettings

    args = thaw.cli.build_parser("serve").parse_args(["serve", str(repo), "--allow-grpc=false"])
    config = serve_cli.build_config(args)
    metrics = Metrics()
    tracer = RequestTracer(TraceSettings(config.trace_defaults))
    manager = ModelManager(
        config, metrics=metrics, tracer=tracer, device_target=serve_cli._device_target(config)
    )
    app = build_app(config, manager, metrics, tracer=tracer)
    runner = web.AppRunner(app, **RUNNER_OPTIONS)
    await runner.setup()
    for _ in range(1200):
        if manager.model_ready("add_sub", None):
            break
        await asyncio.sleep(0.05)
    if fixed_answer:
        zeros = np.zeros(16, np.float32)
        fixed = InferResponse(
            "add_sub", "1", [InferTensor(f"OUTPUT{i}", "FP32", (16,), zeros) for i in (0, 1)]
        )

        async def answer(_: InferRequest) -> InferResponse:
            return fixed

        manager.infer = answer  # type: ignore[method-assign, assignment]
    assert runner.server is not None
    one, transport = _driver(app[CONNECTIONS].wrap(runner.server()), request)
    await one()
    if b" 200 " not in transport.written[0]:
        raise SystemExit(f"thaw answered {transport.written[0][:200]!r}")
    return one, runner.cleanup


async def _time(one: Driver, requests: int, profile: cProfile.Profile | None) -> float:
    if profile is not None:
        profile.enable()
    start = time.thread_time()
    for _ in range(requests):
        await one()
    spent = time.thread_time() - start
    if profile is not None:
        profile.disable()
    return 1e6 * spent / requests


async def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    """µs per request of every layer and payload, `--rounds` times, layers interleaved."""
    workload = add_sub_workload()
    assert workload.binary is not None  # add_sub has a binary request
    payloads = {"json": workload.payload, "binary": workload.binary}
    results: dict[str, list[float]] = {}
    profile = cProfile.Profile(time.thread_time) if args.profile else None
    with tempfile.TemporaryDirectory(prefix="thaw-front-") as scratch:
        drivers: dict[str, Driver] = {}
        cleanups = []
        for layer in args.layers:
            for kind in args.payloads:
                request = raw_request(payloads[kind])
                if layer == "aiohttp":
                    one, cleanup = await _bare(request)
                else:
                    repo = Path(scratch) / f"{layer}-{kind}"
                    write_add_sub(repo)
                    mode = "process" if layer == "process" else "in_process"
                    config = repo / "add_sub" / "config.pbtxt"
                    config.write_text(
                        config.read_text()
                        + f'parameters {{ key: "thaw.python_runtime" value {{ string_value: '
                        f'"{mode}" }} }}\n'
                    )
                    one, cleanup = await _thaw(repo, request, fixed_answer=layer == "front")
                for _ in range(_WARMUP):
                    await one()
                drivers[f"{layer} {kind}"] = one
                cleanups.append(cleanup)
        try:
            names = list(drivers)
            for index in range(args.rounds):
                shift = index % len(names)
                for name in names[shift:] + names[:shift]:
                    prof = profile if name.startswith("front") else None
                    results.setdefault(name, []).append(
                        await _time(drivers[name], args.requests, prof)
                    )
        finally:
            for cleanup in cleanups:
                await cleanup()
    if profile is not None:
        profile.dump_stats(args.profile)
    return results


def render(results: dict[str, list[float]]) -> str:
    lines = [
        "| layer | payload | loop thread µs/request, median (min to max) |",
        "|---|---|---:|",
    ]
    for name, values in results.items():
        layer, kind = name.split(" ")
        lines.append(
            f"| {layer} | {kind} | {statistics.median(values):.1f} "
            f"({min(values):.1f} to {max(values):.1f}) |"
        )
    return "\n".join(lines)


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--layers", default=",".join(LAYERS), help="comma list of " + ",".join(LAYERS)
    )
    parser.add_argument("--payloads", default="json,binary", help="comma list of json, binary")
    parser.add_argument("--profile", help="write a cProfile (thread_time) of the front layer here")
    parser.add_argument("--tree", type=Path, help="another checkout whose server to measure")
    args = parser.parse_args(argv)
    args.layers = [layer for layer in args.layers.split(",") if layer]
    args.payloads = [kind for kind in args.payloads.split(",") if kind]
    if (
        set(args.layers) - set(LAYERS)
        or set(args.payloads) - {"json", "binary"}
        or not args.layers
        or not args.payloads
        or args.requests < 1
        or args.rounds < 1
    ):
        parser.error(f"layers among {', '.join(LAYERS)}; payloads json, binary; counts >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    if args.tree is not None:  # its packages before this checkout's, here and in the stubs
        tree = str(args.tree.resolve())
        sys.path.insert(0, tree)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (tree, os.environ.get("PYTHONPATH", "")) if p
        )
    load_start = os.getloadavg()[0]
    results = uvloop.run(measure(args))
    print(render(results))
    print(machine_line(load_start, os.getloadavg()[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
