"""The CPU one gRPC `ModelInfer` costs `thaw serve`, by layers, each a server of its own, by thread.

    python benchmarks/grpc_front_cpu.py [--concurrency 1 8] [--rounds 3] [--duration-s 3]
        [--layers grpc.aio,front,in_process] [--tree DIR]

`--tree DIR` also runs every Thaw layer from another checkout (a base revision: `git worktree
add DIR REV`), as `LAYER@base`, in the same run: a before/after.

Each layer is a server process on 127.0.0.1, answering the add_sub `ModelInferRequest` of
benchmarks.workloads, loaded in turn by the same closed-loop grpc.aio client
(benchmarks.load_client), rounds interleaved:

- `triton`: Triton 2.51's `tritonserver` (benchmarks.peers.TritonPeer, installed in .bench) with
  add_sub in its Python backend stub: the baseline (its whole process tree; no thread split).
- `grpc.aio`: a bare grpc.aio server (uvloop, as `thaw serve` runs) whose ModelInfer answers
  fixed bytes: the floor any grpc.aio server pays per call (grpc core's HTTP/2 threads, the
  completion-queue poller thread and its wake-up of the event loop, the per-call tasks).
- `grpclib` (not in the default layers; `pip install '.[bench]'`): the same fixed answer from
  grpclib, a gRPC server written in Python on the event loop (h2 for HTTP/2), with no threads
  of its own: the alternative to grpc.aio's threads and their wake-ups of the loop (measured
  2026-12-04: cheaper at concurrency 1, 2.4-3x dearer at 8 and 64; docs/benchmarks/
  2026-12-03-grpc-front-cpu.md).
- `front`: Thaw's GrpcServer and GrpcHandlers, the ModelManager's `infer` answering a fixed
  response: the gRPC front and its codecs (parse, decode, encode), no scheduler, no model.
- `in_process`: the real ModelManager with add_sub run in the server's process.

What it reports is the server's CPU (user+sys) over the measured window per request answered,
whole and by thread: the event loop's, the other Python threads' (grpc's poller, the model's
instance thread) and grpc core's `event_engine` threads. The client shares the machine's CPUs,
so compare layers of one run, never runs on different machines.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import psutil

from benchmarks.load_client import run_grpc_load
from benchmarks.machine import machine_line
from benchmarks.workloads import add_sub_workload, write_add_sub

LAYERS = ("triton", "grpc.aio", "grpclib", "front", "in_process")
DEFAULT_LAYERS = ("triton", "grpc.aio", "front", "in_process")
BASE_SUFFIX = "@base"
_ROOT = Path(__file__).resolve().parent.parent
_READY = "READY"


@dataclass(frozen=True)
class Sample:
    """One layer's measured window: CPU µs per request, whole and by thread group."""

    total: float
    loop: float
    python_threads: float
    grpc_core: float
    rps: float


def _fixed_response() -> bytes:
    from thawwire.grpc_service import pb

    message = pb.ModelInferResponse(model_name="add_sub", model_version="1")
    for index in (0, 1):
        message.outputs.add(name=f"OUTPUT{index}", datatype="FP32", shape=[16])
        message.raw_output_contents.append(np.zeros(16, np.float32).tobytes())
    return bytes(message.SerializeToString())


async def _bare_server(port: int) -> None:
    import grpc

    from thawwire.grpc_service import SERVICE, Method

    answer = _fixed_response()

    async def infer(request: bytes, context: object) -> bytes:
        return answer

    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    handler = grpc.unary_unary_rpc_method_handler(infer)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, {Method.MODEL_INFER.value: handler}),)
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(_READY, flush=True)
    await server.wait_for_termination()


async def _thaw_server(port: int, repo: Path, *, fixed_answer: bool) -> None:
    """`thaw serve`'s ModelManager, GrpcHandlers and GrpcServer (no HTTP), add_sub in process
    (written into `repo`)."""
    import thaw.cli
    from runtime.grpc.handlers import GrpcHandlers
    from runtime.grpc.server import GrpcServer
    from runtime.inference import InferRequest, InferResponse, InferTensor
    from runtime.models.lifecycle import ServerState
    from runtime.models.manager import ModelManager
    from runtime.observe.metrics import Metrics
    from runtime.observe.tracing import RequestTracer
    from runtime.process import cli as serve_cli
    from thawwire.trace_settings import TraceSettings

    write_add_sub(repo)
    config_path = repo / "add_sub" / "config.pbtxt"
    config_path.write_text(
        config_path.read_text()
        + 'parameters { key: "thaw.python_runtime" value { string_value: "in_process" } }\n'
    )
    args = thaw.cli.build_parser("serve").parse_args(
        ["serve", str(repo), "--grpc-port", str(port), "--host", "127.0.0.1"]
    )
    config = serve_cli.build_config(args)
    tracer = RequestTracer(TraceSettings(config.trace_defaults))
    manager = ModelManager(
        config, metrics=Metrics(), tracer=tracer, device_target=serve_cli._device_target(config)
    )
    await manager.start()
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
    server = GrpcServer(config, GrpcHandlers(config, manager, ServerState()).routes())
    await server.start()
    print(_READY, flush=True)
    await asyncio.Event().wait()


async def _grpclib_server(port: int) -> None:
    """The fixed answer from grpclib, its messages left as bytes (a codec that passes them)."""
    from grpclib.const import Cardinality, Handler
    from grpclib.encoding.base import CodecBase
    from grpclib.server import Server, Stream

    from thawwire.grpc_service import Method, method_path

    answer = _fixed_response()

    class Raw(CodecBase):
        __content_subtype__ = "proto"

        def encode(self, message: bytes, message_type: object) -> bytes:
            return message

        def decode(self, data: bytes, message_type: object) -> bytes:
            return data

    async def infer(stream: Stream) -> None:
        await stream.recv_message()
        await stream.send_message(answer)

    class Service:
        def __mapping__(self) -> dict[str, Handler]:
            path = method_path(Method.MODEL_INFER)
            return {path: Handler(infer, Cardinality.UNARY_UNARY, bytes, bytes)}

    server = Server([Service()], codec=Raw())
    await server.start("127.0.0.1", port)
    print(_READY, flush=True)
    await server.wait_closed()


def _serve(layer: str, port: int, repo: Path) -> int:
    import uvloop

    if layer == "grpc.aio":
        uvloop.run(_bare_server(port))
    elif layer == "grpclib":
        uvloop.run(_grpclib_server(port))
    else:
        uvloop.run(_thaw_server(port, repo, fixed_answer=layer == "front"))
    return 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Server:
    """One layer's server process, started from this checkout or `tree`."""

    def __init__(self, layer: str, tree: Path | None, repo: Path) -> None:
        self.port = _free_port()
        argv = [sys.executable, str(Path(__file__).resolve()), "--serve", layer]
        argv += ["--port", str(self.port), "--repo", str(repo)]
        if tree is not None:  # its packages first (this checkout's benchmarks/ still runs it)
            argv += ["--tree", str(tree.resolve())]
        self.proc = subprocess.Popen(
            argv,
            cwd=tree.resolve() if tree is not None else _ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != _READY:
            self.stop()
            raise SystemExit(f"the {layer} server did not start")
        self.process = psutil.Process(self.proc.pid)

    def threads(self) -> dict[int, tuple[str, float]]:
        """Each thread's name and CPU seconds so far."""
        found = {}
        for thread in self.process.threads():
            try:
                name = Path(f"/proc/{self.proc.pid}/task/{thread.id}/comm").read_text().strip()
            except OSError:
                name = "?"
            found[thread.id] = (name, thread.user_time + thread.system_time)
        return found

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


class _Triton:
    """Triton with add_sub, its whole process tree's CPU as one "thread" (no split)."""

    def __init__(self, repo: Path) -> None:
        from benchmarks.peers import TritonPeer

        write_add_sub(repo)
        self.port = _free_port()
        self.handle = TritonPeer().start(repo, _free_port(), grpc_port=self.port)
        self.proc = self.handle.process
        self.process = psutil.Process(self.proc.pid)

    def threads(self) -> dict[int, tuple[str, float]]:
        spent = 0.0
        for process in [self.process, *self.process.children(recursive=True)]:
            try:
                times = process.cpu_times()
            except psutil.Error:  # a stub that just ended
                continue
            spent += times.user + times.system
        return {-1: ("tree", spent)}

    def stop(self) -> None:
        self.handle.stop()


async def _measure(server: _Server | _Triton, concurrency: int, duration_s: float) -> Sample:
    payload = add_sub_workload().grpc
    assert payload is not None
    address = f"127.0.0.1:{server.port}"
    await run_grpc_load(address, payload, concurrency=concurrency, duration_s=0.5, warmup_s=0.5)
    before = server.threads()
    result = await run_grpc_load(
        address, payload, concurrency=concurrency, duration_s=duration_s, warmup_s=0.0
    )
    after = server.threads()
    if result.ok == 0 or result.errors:
        raise SystemExit(f"{result.errors} errors, {result.ok} answers from {address}")
    groups = {"loop": 0.0, "python": 0.0, "core": 0.0}
    for tid, (name, spent) in after.items():
        used = spent - before.get(tid, (name, 0.0))[1]
        if tid == server.proc.pid or name == "tree":  # Triton's tree counts as one
            groups["loop"] += used
        elif name.startswith("event_engine"):
            groups["core"] += used
        else:
            groups["python"] += used
    per = 1e6 / result.ok
    return Sample(
        total=sum(groups.values()) * per,
        loop=groups["loop"] * per,
        python_threads=groups["python"] * per,
        grpc_core=groups["core"] * per,
        rps=result.rps,
    )


async def measure(args: argparse.Namespace) -> dict[tuple[str, int], list[Sample]]:
    """Every layer's samples at every concurrency, `--rounds` times, layers interleaved."""
    names = list(args.layers)
    if args.tree is not None:
        names += [
            f"{layer}{BASE_SUFFIX}" for layer in args.layers if layer in ("front", "in_process")
        ]
    servers: dict[str, _Server | _Triton] = {}
    results: dict[tuple[str, int], list[Sample]] = {}
    scratch = tempfile.TemporaryDirectory(prefix="grpc-front-cpu-")
    try:
        for index, name in enumerate(names):
            repo = Path(scratch.name) / f"repo{index}"  # the server's add_sub
            if name == "triton":
                servers[name] = _Triton(repo)
                continue
            base = name.endswith(BASE_SUFFIX)
            layer = name.removesuffix(BASE_SUFFIX)
            servers[name] = _Server(layer, args.tree if base else None, repo)
        for index in range(args.rounds):
            shift = index % len(names)
            for concurrency in args.concurrency:
                for name in names[shift:] + names[:shift]:
                    sample = await _measure(servers[name], concurrency, args.duration_s)
                    results.setdefault((name, concurrency), []).append(sample)
    finally:
        for server in servers.values():
            server.stop()
        scratch.cleanup()
    return results


def render(results: dict[tuple[str, int], list[Sample]]) -> str:
    lines = [
        "| layer | c | CPU µs/request, median (min to max) | event loop | other Python threads "
        "| grpc core threads | req/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (name, concurrency), samples in sorted(results.items(), key=lambda kv: (kv[0][1],)):

        def med(field: str, samples: list[Sample] = samples) -> float:
            return statistics.median(getattr(s, field) for s in samples)

        totals = [s.total for s in samples]
        split = (
            "- | - | -"  # Triton: one process tree, C++ threads
            if name == "triton"
            else f"{med('loop'):.0f} | {med('python_threads'):.0f} | {med('grpc_core'):.0f}"
        )
        lines.append(
            f"| {name} | {concurrency} | {med('total'):.0f} ({min(totals):.0f} to "
            f"{max(totals):.0f}) | {split} | {med('rps'):.0f} |"
        )
    return "\n".join(lines)


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=3.0, help="measured seconds a cell")
    parser.add_argument(
        "--layers", default=",".join(DEFAULT_LAYERS), help="comma list of " + ",".join(LAYERS)
    )
    parser.add_argument("--tree", type=Path, help="another checkout to run as LAYER@base too")
    parser.add_argument("--serve", choices=LAYERS[1:], help=argparse.SUPPRESS)  # a server process
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--repo", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.layers = [layer for layer in args.layers.split(",") if layer]
    if (
        set(args.layers) - set(LAYERS)
        or not args.layers
        or args.rounds < 1
        or args.duration_s <= 0
        or min(args.concurrency) < 1
    ):
        parser.error(f"layers among {', '.join(LAYERS)}; rounds, concurrency and duration > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    if args.serve:
        if args.tree is not None:  # nothing of runtime/ or thawwire/ is imported yet
            sys.path.insert(0, str(args.tree.resolve()))
        return _serve(args.serve, args.port, args.repo)
    if "grpclib" in args.layers and importlib.util.find_spec("grpclib") is None:
        raise SystemExit("the grpclib layer needs grpclib: pip install '.[bench]'")
    load_start = os.getloadavg()[0]
    started = time.monotonic()
    results = asyncio.run(measure(args))
    print(render(results))
    print(machine_line(load_start, os.getloadavg()[0]), f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
