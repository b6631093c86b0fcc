"""runtime.header_forward: which request headers reach the model as parameters, Triton's way."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.config import ConfigError, ServeConfig
from runtime.header_forward import compile_pattern, forwarded_headers

HEADERS = [("my_header_1", "v1"), ("MY_HEADER_2", "v2"), ("header_1", "x"), ("x-my_header", "y")]


def test_the_pattern_is_case_insensitive_and_matches_anywhere_in_the_name() -> None:
    found = forwarded_headers(compile_pattern("my_header.*"), HEADERS)
    assert found == {"my_header_1": "v1", "MY_HEADER_2": "v2", "x-my_header": "y"}


def test_a_leading_case_sensitive_flag_turns_the_triton_prefix_off() -> None:
    found = forwarded_headers(compile_pattern("(?-i)MY_HEADER.*"), HEADERS)
    assert found == {"MY_HEADER_2": "v2"}


def test_raw_header_bytes_are_read_byte_for_byte() -> None:
    found = forwarded_headers(compile_pattern("^my"), [(b"my_h", b"caf\xe9 "), (b"other", b"z")])
    assert found == {"my_h": "caf\xe9 "}


def test_no_pattern_forwards_nothing() -> None:
    assert forwarded_headers(None, HEADERS) == {}


def test_a_pattern_that_does_not_compile_is_a_config_error_naming_the_flag(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError) as info:
        ServeConfig(repository=tmp_path, grpc_header_forward_pattern="(")
    assert str(info.value).startswith(
        "`grpc_header_forward_pattern` = '(', must be a regular expression: missing )"
    )
