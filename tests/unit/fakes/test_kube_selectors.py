"""Label and field selectors of the fake API server: the query grammar and LabelSelector
objects, as the real server parses them."""

from __future__ import annotations

import pytest

from tests.fakes.kube_errors import StatusError
from tests.fakes.kube_selectors import (
    FieldSelector,
    LabelSelector,
    selector_from_object,
    selector_string,
)

LABELS = {"app": "pool", "tier": "gpu", "thaw.dev/model": "resnet"}


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("", True),
        ("app=pool", True),
        ("app=", False),  # an empty value is valid and compares as ""
        ("app==pool", True),
        ("app!=pool", False),
        ("app!=other", True),
        ("missing!=x", True),  # != matches an absent key, as real
        ("tier in (cpu, gpu)", True),
        ("tier in (cpu)", False),
        ("tier notin (cpu)", True),
        ("missing notin (cpu)", True),
        ("thaw.dev/model", True),
        ("!thaw.dev/model", False),
        ("!missing", True),
        ("app=pool,tier in (gpu),!missing", True),
        ("app=pool,tier=cpu", False),
    ],
)
def test_label_selector_grammar(text: str, matches: bool) -> None:
    assert LabelSelector.parse(text).matches(LABELS) is matches


@pytest.mark.parametrize("text", ["app=bad value", "=x", "a b", "app in (x", "bad key!=x", "a,,b"])
def test_label_selector_parse_errors_are_400(text: str) -> None:
    with pytest.raises(StatusError) as err:
        LabelSelector.parse(text)
    assert err.value.code == 400


def test_label_selector_object_match_labels_and_expressions() -> None:
    selector = {
        "matchLabels": {"app": "pool"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["gpu", "cpu"]},
            {"key": "claimed", "operator": "DoesNotExist"},
        ],
    }
    assert selector_from_object(selector).matches(LABELS)
    assert not selector_from_object(selector).matches({**LABELS, "claimed": "yes"})
    assert selector_string(selector) == "app=pool,tier in (gpu,cpu),!claimed"


def test_field_selector_on_supported_fields() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
    fields = ("metadata.name", "spec.nodeName", "status.phase")
    assert FieldSelector.parse("status.phase=Running,spec.nodeName==n1", fields).matches(pod)
    assert not FieldSelector.parse("status.phase!=Running", fields).matches(pod)
    assert FieldSelector.parse("spec.nodeName=", fields).matches({"metadata": {}, "spec": {}})


def test_field_selector_unknown_field_is_400() -> None:
    with pytest.raises(StatusError) as err:
        FieldSelector.parse("spec.image=x", ("metadata.name",))
    assert err.value.code == 400
    assert "is not a known field selector" in err.value.message
