"""thawserver.restricted_protocols: `--grpc-restricted-protocol` parsed, checked as Triton does."""

from __future__ import annotations

import pytest

from thawserver.restricted_protocols import (
    Category,
    Restriction,
    grpc_category,
    parse_http_restrictions,
    parse_restrictions,
)
from thawwire.grpc_service import UNSUPPORTED, Method


def test_each_category_of_a_flag_gets_the_prefixed_header_and_value() -> None:
    found = parse_restrictions(
        ["model-repository:admin-key=admin-value", "inference,health:infer-key=infer-value"]
    )
    assert found == {
        Category.MODEL_REPOSITORY: Restriction("triton-grpc-protocol-admin-key", "admin-value"),
        Category.INFERENCE: Restriction("triton-grpc-protocol-infer-key", "infer-value"),
        Category.HEALTH: Restriction("triton-grpc-protocol-infer-key", "infer-value"),
    }


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["model-reposit,health:k1=v1"], "unknown restricted protocol 'model-reposit'"),
        (
            ["metadata,health:k1=v1", "health:k2=v2"],
            "restricted protocol 'health' can not be specified in multiple config groups",
        ),
        (
            ["health=v1"],
            "--grpc-restricted-protocol option format is '<config name>:<setting>=<value>'. "
            "Got health=v1",
        ),
        (["health:k1="], "option format is"),
    ],
)
def test_bad_flag_values_are_refused_in_tritons_words(values: list[str], message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_restrictions(values)
    assert message in str(info.value)


def test_a_call_passes_only_with_the_header_and_its_exact_value() -> None:
    restriction = Restriction("triton-grpc-protocol-k", "v")
    assert restriction.allows([("triton-grpc-protocol-k", "v"), ("other", "x")])
    assert not restriction.allows([("triton-grpc-protocol-k", "V")])
    assert not restriction.allows([])
    assert restriction.refusal == (
        "This protocol is restricted, expecting header 'triton-grpc-protocol-k'"
    )


def test_methods_fall_in_tritons_categories() -> None:
    assert grpc_category(Method.MODEL_READY) is Category.HEALTH
    assert grpc_category(Method.MODEL_STREAM_INFER) is Category.INFERENCE
    assert grpc_category(Method.REPOSITORY_INDEX) is Category.MODEL_REPOSITORY
    assert grpc_category(Method.MODEL_STATISTICS) is Category.STATISTICS
    assert grpc_category(Method.TRACE_SETTING) is Category.TRACE
    assert grpc_category(Method.LOG_SETTINGS) is Category.LOGGING


def test_http_restrictions_take_the_key_as_the_header_and_fold_its_case() -> None:
    found = parse_http_restrictions(["inference,metadata:infer-key=infer-value"])
    restriction = found[Category.METADATA]
    assert restriction.header == "infer-key"
    assert restriction.allows([("Infer-Key", "infer-value")], fold_case=True)
    assert not restriction.allows([("Infer-Key", "infer-value")])  # gRPC: names as sent
    assert restriction.refusal == "This API is restricted, expecting header 'infer-key'"
    with pytest.raises(ValueError, match="unknown restricted api 'model-reposit'"):
        parse_http_restrictions(["model-reposit:k=v"])
    with pytest.raises(ValueError, match="--http-restricted-api option format is"):
        parse_http_restrictions(["health"])


def test_every_method_thaw_implements_has_a_category() -> None:
    """The categories are keyed by method name (no grpc import before the zygote forks)."""
    for method in Method:
        assert (grpc_category(method) is None) == (method in UNSUPPORTED), method
