"""Flag defaults handed through the environment are read as the flag would read them: a count
that is not a whole number is refused naming the variable, never replaced by the built-in
default without a word; the flag given on the command line still wins and reads as before."""

from __future__ import annotations

import argparse

import pytest

from thawserver.handed_defaults import HandedDefault, handed, whole_number
from thawserver.max_tokens_flag import DEFAULT_MAX_TOKENS_ENV, add_default_max_tokens_argument
from thawserver.tool_call_flags import PARSE_BYTES_ENV, add_tool_call_arguments
from thawwire.openai_api import DEFAULT_MAX_TOKENS, DEFAULT_MAX_TOOL_CALL_PARSE_BYTES


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _Refused(message)


def _parser(environ: dict[str, str]) -> _Parser:
    parser = _Parser()
    add_default_max_tokens_argument(parser, environ)
    add_tool_call_arguments(parser, environ)
    return parser


def test_unset_or_empty_variables_give_the_built_in_defaults() -> None:
    for environ in ({}, {DEFAULT_MAX_TOKENS_ENV: "", PARSE_BYTES_ENV: ""}):
        args = _parser(environ).parse_args([])
        assert args.default_max_tokens == DEFAULT_MAX_TOKENS
        assert args.max_tool_call_parse_bytes == DEFAULT_MAX_TOOL_CALL_PARSE_BYTES


def test_handed_whole_numbers_are_the_defaults_and_the_flags_win() -> None:
    environ = {DEFAULT_MAX_TOKENS_ENV: "64", PARSE_BYTES_ENV: "4096"}
    args = _parser(environ).parse_args([])
    assert (args.default_max_tokens, args.max_tool_call_parse_bytes) == (64, 4096)
    args = _parser(environ).parse_args(["--default-max-tokens", "8"])
    assert (args.default_max_tokens, args.max_tool_call_parse_bytes) == (8, 4096)


@pytest.mark.parametrize("variable", [DEFAULT_MAX_TOKENS_ENV, PARSE_BYTES_ENV])
@pytest.mark.parametrize("text", ["2k", "1.5", "sixteen", " "])
def test_a_handed_value_that_is_not_a_whole_number_is_refused_in_the_variables_name(
    variable: str, text: str
) -> None:
    with pytest.raises(_Refused) as refused:
        _parser({variable: text}).parse_args([])
    assert f"${variable}={text!r}" in str(refused.value)
    assert "not a whole number" in str(refused.value)


def test_a_bad_handed_value_is_not_read_when_the_flag_is_given() -> None:
    args = _parser({DEFAULT_MAX_TOKENS_ENV: "2k"}).parse_args(["--default-max-tokens", "32"])
    assert args.default_max_tokens == 32


def test_the_flag_itself_reads_as_argparse_int_did() -> None:
    with pytest.raises(_Refused, match=r"argument --default-max-tokens: invalid int value: 'x'"):
        _parser({}).parse_args(["--default-max-tokens", "x"])


def test_negative_and_zero_counts_pass_through_to_the_range_checks() -> None:
    # The ranges are the config's (runtime.config): the type reads numbers, not limits.
    assert whole_number("-1") == -1
    assert whole_number(HandedDefault("0", DEFAULT_MAX_TOKENS_ENV)) == 0
    assert handed({}, DEFAULT_MAX_TOKENS_ENV) is None
    assert handed({DEFAULT_MAX_TOKENS_ENV: "7"}, DEFAULT_MAX_TOKENS_ENV) == "7"


def test_help_shows_a_handed_default() -> None:
    text = _parser({DEFAULT_MAX_TOKENS_ENV: "64"}).format_help()
    assert "default 64)" in " ".join(text.split())
