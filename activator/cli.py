"""`thaw up REPO`: the activator, local scaler, warm pool and snapshot cache on this machine."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from activator.config import SETTING_RANGES, ActivatorConfig, ScaleSettings, validated
from activator.errors import ConfigError
from activator.scaler.backend import ScalerKind
from activator.scaler.local_config import LocalConfig

__all__ = ["register", "run"]

logger = logging.getLogger(__name__)

_DESCRIPTION = """\
Run the whole platform on this machine. Every model of the Triton model repository REPO gets
the KServe v2 endpoints at http://HOST:PORT/v2/models/<name>/... and starts at zero replicas.
Metadata, config and readiness are answered without waking a model; the first inference
request holds while a replica is claimed from the warm pool and the model restored into it,
then replicas follow load (Knative-style stable/panic windows) and go back to zero after the
idle grace period. Each scale setting below is the default for every model; a model overrides
it in its config.pbtxt, e.g.

  parameters { key: "thaw.max_replicas" value { string_value: "2" } }

Prometheus metrics are on /metrics; the status page (models, cold starts, plots, the cost
of scale to zero against always-on replicas) on /ui/; `thaw status` prints a table of the models.
SIGTERM/SIGINT stop accepting, drain in-flight requests and stop every replica.
"""

_SETTING_HELP = {
    "min_replicas": "replicas kept even when idle",
    "max_replicas": "upper bound of replicas per model",
    "target_concurrency": "in-flight requests per replica the autoscaler aims for",
    "scale_to_zero_grace_s": "seconds without requests before the last replica goes",
    "stable_window_s": "seconds of history behind normal scaling decisions",
    "panic_window_s": "seconds of history that detect a burst",
    "panic_threshold": "burst = panic-window demand >= this x ready replicas",
    "scale_down_delay_s": "keep the highest replica count of the last N seconds",
    "activation_timeout_s": "seconds a request may be held; a wake-up slower than this fails",
    "max_held_requests": "held requests per model before 503 + Retry-After",
    "max_held_bytes": "sum of held request bodies (declared) per model before 503",
    "container_concurrency": "in-flight requests per replica (0 = unlimited)",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "up",
        help="run the platform (activator + warm pool + cache) on this machine",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("repository", metavar="REPO", type=Path, help="Triton model repository")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="listen port; 0 picks a free one")
    p.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="snapshot image cache directory (default ~/.cache/thaw/images)",
    )
    p.add_argument(
        "--store",
        default=None,
        help="image store URI (e.g. s3://bucket/prefix); "
        "without it images are built into the cache at start-up",
    )
    p.add_argument("--no-image-build", action="store_true", help="do not build images at start")
    p.add_argument(
        "--scaler",
        choices=[kind.value for kind in ScalerKind],
        default=ScalerKind.LOCAL.value,
        help="where replicas run: local = `thaw serve` processes on this machine (default)",
    )
    local = p.add_argument_group("local scaler (--scaler local)")
    local.add_argument(
        "--warm-pool",
        type=int,
        default=1,
        metavar="N",
        help="idle runtime processes kept ready to claim (default 1)",
    )
    local.add_argument(
        "--preload-frameworks",
        default="onnxruntime,torch",
        help="frameworks warm-pool processes import before ready ('' for none)",
    )
    local.add_argument(
        "--arena-bytes",
        type=int,
        default=None,
        help="restore arena pre-faulted per pool process (default: largest model)",
    )
    p.add_argument(
        "--request-timeout-s",
        type=float,
        default=300.0,
        help="a proxied request with no answer by then gets 504",
    )
    p.add_argument(
        "--drain-timeout-s",
        type=float,
        default=30.0,
        help="scale-down/shutdown wait for in-flight requests",
    )
    p.add_argument("--max-body-bytes", type=int, default=64 * 1024 * 1024)
    p.add_argument(
        "--direct-connections",
        choices=["on", "off"],
        default="on",
        help="hand a warm model's new client connections straight to a replica, taking the "
        "activator out of their data path (default on; per model: thaw.direct_connections "
        '"true"/"false"). Direct connections skip the activator\'s queue, breaker and '
        "timeouts, and a replica that dies resets them instead of answering 502",
    )
    local.add_argument(
        "--direct-max-age-s",
        type=float,
        default=10.0,
        help="a direct connection older than this is closed after its next response, so "
        "clients reconnect through the activator and load rebalances (default 10)",
    )
    p.add_argument(
        "--gpu-hour-price",
        type=float,
        default=None,
        metavar="PRICE",
        help="price of one GPU-hour: the status page, `thaw status --cost` and "
        "/thaw/status then show GPU-seconds used and saved as money too",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    scale = p.add_argument_group("scale settings (defaults for every model; thaw.<name> overrides)")
    defaults = ScaleSettings()
    for name, (low, high) in SETTING_RANGES.items():
        default = getattr(defaults, name)
        scale.add_argument(
            f"--{name.replace('_', '-')}",
            dest=f"scale_{name}",
            default=None,
            metavar="N",
            help=f"{_SETTING_HELP[name]} (default {default}, range [{low:g}, {high:g}])",
        )
    p.set_defaults(func=run)


def build_config(args: argparse.Namespace) -> ActivatorConfig:
    """Flags -> ActivatorConfig; raises ConfigError with the flag, value and range."""
    given = {
        name: getattr(args, f"scale_{name}")
        for name in SETTING_RANGES
        if getattr(args, f"scale_{name}") is not None
    }
    given["direct_connections"] = args.direct_connections
    settings = validated(ScaleSettings(), given)
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"`--port` = {args.port}, must be in [0, 65535]")
    _check_range("--warm-pool", args.warm_pool, 0, 64)
    _check_range("--max-body-bytes", args.max_body_bytes, 1, 1 << 40)
    _check_range("--request-timeout-s", args.request_timeout_s, 0.1, 86_400)
    _check_range("--drain-timeout-s", args.drain_timeout_s, 0, 3600)
    _check_range("--direct-max-age-s", args.direct_max_age_s, 0, 86_400)
    if args.arena_bytes is not None:
        _check_range("--arena-bytes", args.arena_bytes, 0, 1 << 44)
    if args.gpu_hour_price is not None:
        _check_range("--gpu-hour-price", args.gpu_hour_price, 0, 1_000_000)
    cache = args.cache or Path(os.path.expanduser("~/.cache/thaw/images"))
    return ActivatorConfig(
        repository=args.repository,
        host=args.host,
        port=args.port,
        cache_dir=cache,
        store=args.store,
        build_images=not args.no_image_build,
        defaults=settings,
        max_body_bytes=args.max_body_bytes,
        request_timeout_s=args.request_timeout_s,
        drain_timeout_s=args.drain_timeout_s,
        scaler=_scaler_config(args),
        gpu_hour_price=args.gpu_hour_price,
    )


def _scaler_config(args: argparse.Namespace) -> LocalConfig:
    """The chosen scaler backend's config, from its flags (`--scaler`; only `local` now)."""
    frameworks = tuple(f for f in args.preload_frameworks.split(",") if f.strip())
    return LocalConfig(
        warm_pool=args.warm_pool,
        preload_frameworks=frameworks,
        arena_bytes=max(0, args.arena_bytes or 0),
        direct_max_age_s=args.direct_max_age_s,
    )


def _check_range(flag: str, value: float, low: float, high: float) -> None:
    if not (math.isfinite(value) and low <= value <= high):
        raise ConfigError(f"`{flag}` = {value:g}, must be in [{low:g}, {high:g}]")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from activator.repository import Repository

    try:
        config = build_config(args)
        repository = Repository.scan(config.repository, config.defaults)
    except ConfigError as exc:
        print(f"thaw up: error: {exc.message}", file=sys.stderr)
        return 2
    for name, reason in sorted(repository.unavailable.items()):
        print(f"thaw up: warning: model '{name}' is unavailable: {reason}", file=sys.stderr)
    if not repository.names():
        print(f"thaw up: warning: no servable model in {config.repository}", file=sys.stderr)
    if args.arena_bytes is None:
        largest = max(
            (repository.get(n).version_dir_bytes() for n in repository.names()), default=0
        )
        config = dataclasses.replace(
            config, scaler=dataclasses.replace(config.scaler, arena_bytes=largest)
        )
    if config.cache_dir is not None:
        config.cache_dir.mkdir(parents=True, exist_ok=True)
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(serve(config, repository))
    except _ListenError as exc:
        print(f"thaw up: error: {exc}", file=sys.stderr)
        return 1
    return 0


class _ListenError(Exception):
    """The activator could not bind its listen address."""


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when installed (the proxy's per-request cost roughly halves), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def serve(config: ActivatorConfig, repository: Any = None) -> None:
    """Serve until SIGTERM/SIGINT, then stop accepting, drain and stop every replica."""
    from activator.app import FLEET, build_app
    from activator.front_door import FrontDoor
    from thawwire.aiohttp_compat import JsonErrorRunner
    from thawwire.handoff_protocol import listening_line

    # Bound before the app starts: replicas (the warm pool starts with the app) are told
    # the front door's address, which --port 0 only fixes here.
    try:
        listener = _listen(config.host, config.port)
    except OSError as exc:  # port taken, address not local or not resolvable
        reason = exc.strerror or str(exc)
        raise _ListenError(f"cannot listen on {config.host}:{config.port}: {reason}") from None
    port = listener.getsockname()[1]
    local = dataclasses.replace(config.scaler, front_door_url=_front_door_url(listener))
    config = dataclasses.replace(config, port=port, scaler=local)
    app = build_app(config, repository=repository)
    # auto_decompress off: compressed bodies pass through to the replica untouched. Requests
    # aiohttp cannot parse are answered in JSON, as every other error.
    runner = JsonErrorRunner(
        app,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=30,
        auto_decompress=False,
    )
    await runner.setup()
    assert runner.server is not None  # set by setup()
    door = FrontDoor(listener, runner.server, app[FLEET].endpoints, app[FLEET].metrics)
    door.start()
    print(listening_line(f"http://{config.host}:{port}"), flush=True)
    logger.info("thaw up: %d models at http://%s:%d", len(repository.names()), config.host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        logger.info("thaw up: stopping (draining requests and replicas)")
        await door.close()
        with contextlib.suppress(Exception):
            await runner.cleanup()


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on the first address `host` resolves to."""
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    return socket.create_server(address[:2], family=family, backlog=1024)


def _front_door_url(listener: socket.socket) -> str:
    """How a local replica reaches the listener (a wildcard address means loopback)."""
    host, port = listener.getsockname()[:2]
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
