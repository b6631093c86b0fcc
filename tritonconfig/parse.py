"""Parse a ModelConfig from `config.pbtxt` text or from JSON; errors name source, line, field."""

from __future__ import annotations

import re

from google.protobuf import json_format, text_format

from tritonconfig.errors import ModelConfigError
from tritonconfig.schema import mc

__all__ = ["config_from_json", "parse_config"]

_POSITION = re.compile(r"^\d+:\d+ : ")


def parse_config(text: str, source: str) -> mc.ModelConfig:
    """Parse config.pbtxt text; a ModelConfigError names `source`, the line and the field."""
    config = mc.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        where = f"{source}:{exc.GetLine()}" if exc.GetLine() else source
        raise ModelConfigError(f"{where}: {_POSITION.sub('', str(exc))}") from exc
    except (ValueError, UnicodeError) as exc:
        raise ModelConfigError(f"{source}: {exc}") from exc
    return config


def config_from_json(text: str, source: str) -> mc.ModelConfig:
    """Parse a ModelConfig given as JSON (the `config` load parameter)."""
    config = mc.ModelConfig()
    try:
        json_format.Parse(text, config)
    except (json_format.ParseError, ValueError, RecursionError) as exc:
        raise ModelConfigError(f"{source}: {exc}") from exc
    return config
