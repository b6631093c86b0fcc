"""`thaw up`'s body caps: the clients' (`--max-body-bytes`) and the platform's own calls'
(`--max-internal-body-bytes`, with the deployment's token of `--internal-token-file`:
thawwire.internal_calls), as flags and as the config they become."""

from __future__ import annotations

import argparse
from pathlib import Path

from activator.errors import ConfigError
from activator.process.flag_checks import check_range
from thawwire.internal_calls import DEFAULT_MAX_BODY_BYTES as DEFAULT_INTERNAL_BODY_BYTES
from thawwire.internal_calls import InternalCalls, TokenError, new_token, read_token

__all__ = ["add_body_limit_arguments", "internal_calls"]


def add_body_limit_arguments(p: argparse.ArgumentParser) -> None:
    """--max-body-bytes, --max-internal-body-bytes, --internal-token-file."""
    p.add_argument(
        "--max-body-bytes", type=int, default=64 * 1024 * 1024, metavar="BYTES",
        help="the largest request body the front doors take (default 64 MiB; larger: 413); "
        "given to every replica too",
    )  # fmt: skip
    p.add_argument(
        "--max-internal-body-bytes", type=int, default=DEFAULT_INTERNAL_BODY_BYTES,
        metavar="BYTES",
        help="the largest body of the platform's own requests through the front door: a "
        "Python model's BLS call to a model on another replica, an ensemble's step (default "
        "4 GiB). They carry the deployment's token, which no client has; given to every "
        "replica too",
    )  # fmt: skip
    p.add_argument(
        "--internal-token-file", type=Path, metavar="PATH",
        help="the deployment's token (at least 32 printable characters). Local scaler: made "
        "afresh at each start when not given. Kubernetes: the Secret the chart mounts in the "
        "activators and the pool pods; without it the platform's own requests keep the client "
        "cap (--max-body-bytes)",
    )  # fmt: skip


def internal_calls(args: argparse.Namespace, *, kubernetes: bool) -> InternalCalls | None:
    """The deployment's token (`--internal-token-file`; on the local scaler a fresh one when
    not given) and the cap of the requests that carry it; None on Kubernetes without a file.
    ConfigError names a cap out of range or a file that holds no token."""
    check_range("--max-internal-body-bytes", args.max_internal_body_bytes, 1024, 1 << 40)
    if args.internal_token_file is not None:
        try:
            token = read_token(args.internal_token_file)
        except TokenError as exc:
            raise ConfigError(f"--internal-token-file: {exc}") from None
    elif kubernetes:
        return None
    else:
        token = new_token()
    return InternalCalls(token, args.max_internal_body_bytes)
