"""The OpenAI routes' LoRA selection on Kubernetes: `runtime.loraSeparator` becomes
`--lora-separator` of the activators (`thaw up`, which lists and routes `<model><sep><lora>`)
and of every warm pool's `thaw serve` (which splits it), both parsed into their configs; unset,
neither gets the flag."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.unit.deploy.chart_paths import CHART, Render, as_mounted

VALUES: dict[str, Any] = yaml.safe_load((CHART / "examples" / "gpu-karpenter.yaml").read_text())


def _args(objects: list[dict[str, Any]], component: str) -> list[list[str]]:
    found = []
    for o in objects:
        labels = o["metadata"]["labels"]
        if o["kind"] == "Deployment" and labels.get("app.kubernetes.io/component") == component:
            containers = o["spec"]["template"]["spec"]["containers"]
            found += [list(c["args"]) for c in containers if c.get("args")]
    assert found, component
    return found


def test_the_value_reaches_the_activators_and_every_pool(
    render: Render, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime.process.cli import build_config
    from thaw.cli import build_parser
    from thawserver.lora_flags import LORA_SEPARATOR_ENV

    monkeypatch.delenv(LORA_SEPARATOR_ENV, raising=False)
    values = {**VALUES, "runtime": {**VALUES["runtime"], "loraSeparator": "#lora: "}}
    objects = render(values)
    pools = _args(objects, "runtime")
    assert len(pools) > 1  # the GPU class's pods too
    for args in pools:
        assert "--lora-separator=#lora: " in args
        config = build_config(build_parser("serve").parse_args(as_mounted(args)))
        assert config.lora_separator == "#lora: "
    for args in _args(objects, "activator"):
        assert "--lora-separator=#lora: " in args
        assert build_parser("up").parse_args(args).lora_separator == "#lora: "
    for args in [*_args(render(VALUES), "runtime"), *_args(render(VALUES), "activator")]:
        assert not [a for a in args if a.startswith("--lora-separator")]


def test_the_value_is_documented() -> None:
    docs = (CHART.parents[2] / "docs" / "kubernetes.md").read_text()
    assert "`runtime.loraSeparator`" in docs
