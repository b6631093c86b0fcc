"""`thaw prefetch REPO --store URI --cache DIR`: keep hot models' images in a node's cache."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from activator.config import ScaleSettings
from activator.errors import ConfigError
from activator.fleet.repository import Repository
from thawserver.log_records import log_to_stderr
from thawserver.ranges import out_of_range

__all__ = ["register", "run"]

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "prefetch",
        help="pull hot models' images (thaw.hot) into a node-local cache, periodically",
        description="Pull the snapshot image of every model marked hot (config.pbtxt "
        'parameters { key: "thaw.hot" value { string_value: "true" } }, or --model-settings) '
        "from the store into the node-local cache the runtime pods restore from. The Helm "
        "chart runs it as a DaemonSet. Exit status with --once: 0 when every pull succeeded.",
    )
    p.add_argument("repository", metavar="REPO", type=Path, help="Triton model repository")
    p.add_argument("--store", required=True, metavar="URI", help="image store (s3://... or a dir)")
    p.add_argument("--cache", required=True, type=Path, metavar="DIR", help="node-local cache")
    p.add_argument("--target", default="cpu", help="image target: cpu (default) or cuda[:sm_XX]")
    p.add_argument(
        "--model-settings",
        type=Path,
        default=None,
        metavar="FILE",
        help='per-model `thaw.*` overrides, JSON {"models": {name: {"thaw.hot": "true"}}} '
        "(the Helm chart's models ConfigMap)",
    )
    p.add_argument(
        "--interval-s", type=float, default=300.0, help="seconds between passes (default 300)"
    )
    p.add_argument(
        "--pull-timeout-s",
        type=float,
        default=1800.0,
        help="the longest one image pull may take, in seconds (default 1800)",
    )
    p.add_argument("--once", action="store_true", help="one pass, then exit")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    log_to_stderr(args.log_level.upper())
    for flag, value in (
        ("--interval-s", args.interval_s),
        ("--pull-timeout-s", args.pull_timeout_s),
    ):
        problem = out_of_range(flag, value, 1, 86_400)
        if problem is not None:
            print(f"thaw prefetch: error: {problem}", file=sys.stderr)
            return 2
    try:
        return asyncio.run(_serve(args))
    except ConfigError as exc:
        print(f"thaw prefetch: error: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


async def _serve(args: argparse.Namespace) -> int:
    from activator.process.prefetch import hot_models, prefetch_once

    command = [sys.executable, "-m", "thaw.cli"]
    while True:
        # Read every pass: the repository and settings (ConfigMaps) change under a DaemonSet.
        models = hot_models(await asyncio.to_thread(_repository, args))
        results = await prefetch_once(
            command,
            models,
            store=args.store,
            cache=args.cache,
            target=args.target,
            timeout_s=args.pull_timeout_s,
        )
        failed = [r.model for r in results if not r.ok]
        logger.info("prefetch pass: %d hot models, %d failed", len(results), len(failed))
        if args.once:
            return 1 if failed else 0
        await asyncio.sleep(args.interval_s)


def _repository(args: argparse.Namespace) -> Repository:
    from activator.fleet.model_settings import apply_model_settings, read_model_settings

    repository = Repository.scan(args.repository, ScaleSettings())
    if args.model_settings is not None:
        overrides = read_model_settings(args.model_settings)
        repository, _ = apply_model_settings(repository, overrides, source=args.model_settings)
    return repository
