"""`thaw up --exit-timeout-secs S` is tritonserver's name for `--drain-timeout-s S` (how long
shutdown waits for in-flight requests): test.sh scripts give it (qa/L0_warmup)."""

from __future__ import annotations

import argparse
from pathlib import Path

from activator.process import cli as up_cli


def _config(*argv: str) -> float:
    parser = argparse.ArgumentParser()
    up_cli.register(parser.add_subparsers())
    args = parser.parse_args(["up", *argv])
    return float(up_cli.build_config(args).drain_timeout_s)


def test_exit_timeout_secs_is_the_drain_timeout(tmp_path: Path) -> None:
    assert _config(str(tmp_path)) == 30.0
    assert _config(str(tmp_path), "--exit-timeout-secs=120") == 120.0
    assert _config(str(tmp_path), "--drain-timeout-s", "5", "--exit-timeout-secs", "7") == 7.0
