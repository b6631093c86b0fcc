"""activator.fleet.rate_limits: with `thaw up --rate-limit=execution_count`, the models that share
replicas for a rate-limiter resource in common, and a later load judged beside the served
models; nothing with the rate limiter off or on Kubernetes."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format

from activator.config import ScaleSettings
from activator.fleet.rate_limits import load_problem, sharing
from activator.fleet.repository import ModelEntry
from activator.scaler.kube_config import KubernetesConfig
from activator.scaler.local_config import LocalConfig
from thawserver.rate_limit_flags import ExplicitResource
from tritonconfig.schema import mc

_ON = LocalConfig(rate_limited=True)


def _entry(name: str, resources: str) -> ModelEntry:
    group = f"count: 1 kind: KIND_CPU rate_limiter {{ resources [ {resources} ] }}"
    text = f"instance_group [ {{ {group} }} ]"
    config = text_format.Parse(text, mc.ModelConfig())
    return ModelEntry(name, Path("/nowhere") / name, config, ("1",), ScaleSettings())


def test_models_naming_a_resource_in_common_share_only_with_the_limiter_on() -> None:
    entries = {
        "a": _entry("a", '{ name: "R" count: 1 }'),
        "b": _entry("b", '{ name: "R" count: 2 }, { name: "S" count: 1 }'),
        "c": _entry("c", '{ name: "T" count: 1 }'),
    }
    assert sharing(_ON, entries) == {"a": frozenset({"R"}), "b": frozenset({"R", "S"})}
    assert sharing(LocalConfig(), entries) == {}  # --rate-limit=off (the default)
    assert sharing(KubernetesConfig(), entries) == {}


def test_a_later_load_is_judged_beside_the_served_models_not_itself() -> None:
    served = {"a": _entry("a", '{ name: "R" global: true count: 2 }')}
    clash = _entry("b", '{ name: "R" count: 2 }')
    assert "present as both global and device-specific" in (load_problem(_ON, clash, served) or "")
    # Its own earlier files are not another model: a changed model is judged without them.
    changed = _entry("a", '{ name: "R" count: 2 }')
    assert load_problem(_ON, changed, served) is None
    counted = LocalConfig(rate_limited=True, rate_limit_resources=(ExplicitResource("R", 2),))
    greedy = _entry("c", '{ name: "R" global: true count: 3 }')
    assert "limited to 2" in (load_problem(counted, greedy, served) or "")
    assert load_problem(counted, _entry("d", '{ name: "R" global: true count: 2 }'), served) is None
    assert load_problem(LocalConfig(), clash, served) is None  # the limiter off: no refusal
