"""The OpenAI routes' flags on Kubernetes: `runtime.toolCallParser`,
`runtime.maxToolCallParseBytes` and `runtime.defaultMaxTokens` become every warm pool's
`thaw serve --tool-call-parser` / `--max-tool-call-parse-bytes` / `--default-max-tokens` (only
when set), which `thaw serve` parses into its config; the
schema takes exactly the parsers Thaw has. (`thaw up --scaler kubernetes` refuses the flags,
naming these values: tests/unit/activator/test_flag_checks_tool_calls.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.unit.deploy.chart_paths import CHART, Render, as_mounted, runtime_args
from thawwire.openai_api import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_MAX_TOOL_CALL_PARSE_BYTES,
    TOOL_CALL_PARSERS,
)

VALUES: dict[str, Any] = yaml.safe_load((CHART / "examples" / "gpu-karpenter.yaml").read_text())


def test_set_values_reach_every_pools_thaw_serve(render: Render) -> None:
    from runtime.process.cli import build_config
    from thaw.cli import build_parser

    values = {**VALUES, "runtime": {**VALUES["runtime"], "toolCallParser": "mistral",
                                    "maxToolCallParseBytes": 65536,
                                    "defaultMaxTokens": 512}}  # fmt: skip
    pools = runtime_args(render(values))
    assert len(pools) > 1  # the GPU class's pods too
    for name, args in pools.items():
        assert {
            "--tool-call-parser=mistral",
            "--max-tool-call-parse-bytes=65536",
            "--default-max-tokens=512",
        } <= set(args)
        config = build_config(build_parser("serve").parse_args(as_mounted(args)))
        assert config.tool_call_parser == "mistral", name
        assert config.max_tool_call_parse_bytes == 65536, name
        assert config.default_max_tokens == 512, name


def test_unset_values_leave_thaw_serves_defaults(
    render: Render, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime.process.cli import build_config
    from thawserver.max_tokens_flag import DEFAULT_MAX_TOKENS_ENV
    from thawserver.tool_call_flags import PARSE_BYTES_ENV, PARSER_ENV

    # thaw serve's defaults, not this shell's
    for name in (PARSER_ENV, PARSE_BYTES_ENV, DEFAULT_MAX_TOKENS_ENV):
        monkeypatch.delenv(name, raising=False)
    from thaw.cli import build_parser

    for name, args in runtime_args(render(VALUES)).items():
        flags = ("--tool-call", "--max-tool-call", "--default-max-tokens")
        assert not [a for a in args if a.startswith(flags)], name
        config = build_config(build_parser("serve").parse_args(as_mounted(args)))
        assert config.tool_call_parser is None
        assert config.max_tool_call_parse_bytes == DEFAULT_MAX_TOOL_CALL_PARSE_BYTES
        assert config.default_max_tokens == DEFAULT_MAX_TOKENS


def test_the_schema_takes_thaws_parsers_and_refuses_others(render: Render) -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    runtime = schema["properties"]["runtime"]["properties"]
    assert runtime["toolCallParser"]["enum"] == ["", *TOOL_CALL_PARSERS]
    bad_values = (
        "runtime.toolCallParser=hermes",
        "runtime.maxToolCallParseBytes=-1",
        "runtime.defaultMaxTokens=-1",
        "runtime.defaultMaxTokens=1048577",
    )
    for bad in bad_values:
        done = render(VALUES, bad, check=False)
        assert done.returncode != 0, bad
        assert "values don't meet the specifications of the schema" in done.stderr, bad


@pytest.mark.parametrize(
    "key", ["runtime.toolCallParser", "runtime.maxToolCallParseBytes", "runtime.defaultMaxTokens"]
)
def test_the_values_are_documented(key: str) -> None:
    docs = (CHART.parents[2] / "docs" / "kubernetes.md").read_text()
    assert f"`{key}`" in docs
