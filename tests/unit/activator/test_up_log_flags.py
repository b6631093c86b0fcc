"""`thaw up`'s refusal of a bad log flag names the flag as it is typed, as `thaw serve`'s."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from activator.errors import ConfigError
from activator.process import cli as up_cli


def test_a_bad_log_format_is_refused_naming_the_flag(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    up_cli.register(parser.add_subparsers())
    args = parser.parse_args(["up", str(tmp_path), "--log-format", "json"])
    with pytest.raises(ConfigError) as refused:
        up_cli.build_config(args)
    assert refused.value.message == (
        "`--log-format` = 'json': invalid argument for log_format, got: json"
    )
