"""`thaw serve REPO`: flags -> ServeConfig -> ModelManager + v2 app -> a serving process."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from runtime.config import ConfigError, ModelControlMode, ServeConfig, parse_cuda_pool

__all__ = ["build_config", "register", "run"]

logger = logging.getLogger(__name__)

_DESCRIPTION = """\
Serve a Triton model repository (<repo>/<model>/config.pbtxt, <repo>/<model>/<version>/model.*)
over the KServe v2 HTTP protocol, like `tritonserver --model-repository REPO`. /metrics is
served on the same port. With --port 0 a free port is chosen; the server prints
`THAW_LISTENING http://HOST:PORT` on stdout once it accepts connections.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `serve` to the `thaw` command line."""
    p = subparsers.add_parser(
        "serve",
        help="serve one model repository (KServe v2 / Triton HTTP)",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("repository", metavar="REPO", type=Path, help="model repository directory")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="port; 0 picks a free one (default 8000)")
    p.add_argument(
        "--model-control-mode",
        choices=[m.value for m in ModelControlMode],
        default="none",
        help="none: load every model at start; poll: also reload on repository changes; "
        "explicit: load only --load-model and what the load API asks for (default none)",
    )
    p.add_argument(
        "--load-model",
        action="append",
        default=[],
        metavar="NAME",
        help="in explicit mode, a model to load at start (repeatable; '*' loads all)",
    )
    p.add_argument("--repository-poll-secs", type=float, default=15.0, help="poll interval")
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=64 * 1024 * 1024,
        help="request body cap, also after gzip/deflate decoding; over it -> 413 (default 64 MiB)",
    )
    p.add_argument(
        "--max-json-depth", type=int, default=100, help="JSON nesting cap (400 above; Triton's 100)"
    )
    p.add_argument("--store", default=None, metavar="URI", help="snapshot image store (s3://...)")
    p.add_argument("--cache", type=Path, default=None, metavar="DIR", help="local image cache")
    p.add_argument("--target", default="cpu", help="image target: cpu or cuda[:sm_XX]")
    p.add_argument(
        "--preload-frameworks",
        default="",
        metavar="LIST",
        help="comma list of onnxruntime,torch,tensorrt to import before reporting ready",
    )
    p.add_argument("--arena-bytes", type=int, default=0, help="pre-fault a restore arena (bytes)")
    p.add_argument("--log-level", default="info", help="debug|info|warning|error")
    p.add_argument(
        "--exit-timeout-secs",
        type=float,
        default=30.0,
        help="on SIGTERM, how long in-flight requests may take to finish, then how long "
        "unloading may take (default 30)",
    )
    p.add_argument(
        "--body-timeout-secs",
        type=float,
        default=60.0,
        help="a request body must arrive within this many seconds, else 400 (default 60)",
    )
    p.add_argument(
        "--event-loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="auto uses uvloop when it is installed (faster HTTP), else asyncio",
    )
    p.add_argument(
        "--inline-exec-max-us",
        type=int,
        default=200,
        help="a Python-backend model whose executions all took at most this many microseconds "
        "runs on the event loop instead of a worker thread (0: never; default %(default)s)",
    )
    _add_gpu_flags(p)
    internal = p.add_argument_group("internal (set by `thaw up` for its replicas)")
    internal.add_argument(
        "--handoff-socket",
        type=Path,
        default=None,
        metavar="PATH",
        help="Unix socket (created 0600) on which `thaw up` hands over client connections",
    )
    internal.add_argument(
        "--front-door",
        default=None,
        metavar="URL",
        help="where requests on handed-off connections go when this replica cannot answer them",
    )
    internal.add_argument(
        "--handoff-state",
        type=Path,
        default=None,
        metavar="PATH",
        help="file of per-connection state bytes shared with `thaw up` for handed-off "
        "connections (it answers them if this process dies)",
    )
    internal.add_argument(
        "--handoff-max-age-s",
        type=float,
        default=10.0,
        metavar="S",
        help="a handed-off connection's next response after this long closes it "
        "(default %(default)s)",
    )
    p.set_defaults(func=run)


def _add_gpu_flags(p: argparse.ArgumentParser) -> None:
    """The GPU flags (docs/gpu.md): a CUDA-ready warm process before it reports ready."""
    gpu = p.add_argument_group("GPU (CUDA-ready warm processes; docs/gpu.md)")
    gpu.add_argument(
        "--cuda-memory-pool-byte-size",
        action="append",
        default=[],
        metavar="<gpu>:<bytes>",
        help="before reporting ready, create the CUDA context on this GPU and reserve this much "
        "device memory for restores and models (repeatable, one per GPU; Triton's flag)",
    )
    gpu.add_argument(
        "--pinned-memory-pool-byte-size",
        type=int,
        default=0,
        metavar="BYTES",
        help="pin a host staging buffer of this size before reporting ready; restores to a GPU "
        "copy through it (default 0: each restore pins its own ring of 384 MiB)",
    )
    gpu.add_argument(
        "--vram-headroom-bytes",
        type=int,
        default=512 << 20,
        metavar="BYTES",
        help="a restore to a GPU needs the image plus this much free device memory, else the "
        "load fails with 503 (default 512 MiB)",
    )


def build_config(args: argparse.Namespace) -> ServeConfig:
    """The one ServeConfig of this process; ConfigError names a bad flag."""
    frameworks = tuple(f.strip() for f in args.preload_frameworks.split(",") if f.strip())
    return ServeConfig(
        repository=args.repository,
        host=args.host,
        port=args.port,
        model_control_mode=ModelControlMode(args.model_control_mode),
        load_models=tuple(args.load_model),
        repository_poll_secs=args.repository_poll_secs,
        max_body_bytes=args.max_body_bytes,
        max_json_depth=args.max_json_depth,
        store=args.store,
        cache=args.cache,
        target=args.target,
        preload_frameworks=frameworks,
        arena_bytes=args.arena_bytes,
        log_level=args.log_level.lower(),
        exit_timeout_s=args.exit_timeout_secs,
        event_loop=args.event_loop,
        body_timeout_s=args.body_timeout_secs,
        inline_exec_max_us=args.inline_exec_max_us,
        handoff_socket=args.handoff_socket,
        front_door=args.front_door,
        handoff_max_age_s=args.handoff_max_age_s,
        handoff_state=args.handoff_state,
        cuda_memory_pools=tuple(parse_cuda_pool(t) for t in args.cuda_memory_pool_byte_size),
        pinned_memory_pool_bytes=args.pinned_memory_pool_byte_size,
        vram_headroom_bytes=args.vram_headroom_bytes,
    )


def wants_cuda_warmup(config: ServeConfig) -> bool:
    """A CUDA target or a GPU flag: warm up CUDA before reporting ready."""
    return (
        config.target.startswith("cuda")
        or bool(config.cuda_memory_pools)
        or config.pinned_memory_pool_bytes > 0
    )


def run(args: argparse.Namespace) -> int:
    """Entry point of `thaw serve`; returns the process exit status."""
    try:
        config = build_config(args)
    except ConfigError as exc:
        print(f"thaw serve: error: {exc}", file=sys.stderr)
        return 2
    if not config.repository.is_dir():
        print(
            f"thaw serve: error: repository {config.repository} is not a directory", file=sys.stderr
        )
        return 2
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return _run_loop(_serve(config), config.event_loop)


def _run_loop(main: Coroutine[Any, Any, int], event_loop: str) -> int:
    """Run `main` on uvloop when asked (or, for `auto`, when installed), else on asyncio."""
    if event_loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if event_loop == "uvloop":
                main.close()
                print(
                    "thaw serve: error: --event-loop uvloop, but uvloop is not installed",
                    file=sys.stderr,
                )
                return 2
        else:
            return uvloop.run(main)
    return asyncio.run(main)


async def _serve(config: ServeConfig) -> int:
    # Imported here so `thaw serve --help` stays fast.
    from runtime.app import SERVER_STATE, build_app
    from runtime.metrics import Metrics
    from runtime.model_manager import ModelManager
    from runtime.server import serve_app

    arena = None
    warmups: tuple[Callable[[], object], ...] = ()
    if config.arena_bytes:
        from snapshotter import Arena

        arena = Arena(config.arena_bytes)
        warmups = (arena.prefault,)
    metrics = Metrics()
    cuda = None
    if wants_cuda_warmup(config):
        from runtime.cuda_warmup import CudaWarmup

        cuda = CudaWarmup(config, metrics=metrics, arena=arena)
        warmups = (*warmups, cuda.run)  # after the arena is pre-faulted: it pins that arena
    # The manager builds the snapshotter's ImageLoader itself when --store/--cache is set.
    manager = ModelManager(
        config, metrics=metrics, arena=arena, staging=cuda.staging if cuda else None
    )
    app = build_app(config, manager, metrics, warmups=warmups)
    status = await serve_app(app, config)
    if not app[SERVER_STATE].stopped_cleanly:
        # A model thread is stuck; asyncio.run would wait for it forever. Leave now.
        logging.shutdown()
        sys.stdout.flush()
        os._exit(status)
    return status
