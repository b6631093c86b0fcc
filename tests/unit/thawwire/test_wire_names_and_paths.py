"""thawwire.names and thawwire.paths: one name rule, one version rule, one model-path grammar
for the activator's front door and a replica alike; hostile names and paths are refused."""

from __future__ import annotations

import pytest

from thawwire.names import (
    INT64_MAX,
    MAX_MODEL_NAME_CHARS,
    canonical_version,
    is_model_name,
    is_version,
    version_refusal,
)
from thawwire.paths import changes_serving, model_of


@pytest.mark.parametrize(
    "name",
    [
        "add_sub",
        "resnet50",
        "bert-base.v2",
        "M_1",
        "_x",
        "9",
        "a" * MAX_MODEL_NAME_CHARS,
        "nop_TYPE_FP32_4,1,2",
    ],
)
def test_plain_names_pass(name: str) -> None:
    assert is_model_name(name)


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "../etc", "a/b", "/abs", ".hidden", "-x", "a\x00b", "a\nb", "model\n",
     "a b", "a\\b", "..a", "a..b", "$(rm)", "a;b", ",a", "é", "a" * (MAX_MODEL_NAME_CHARS + 1)],
)  # fmt: skip
def test_names_that_could_be_paths_or_shell_words_are_refused(name: str) -> None:
    assert not is_model_name(name)


def test_a_name_with_dims_is_served_and_routed() -> None:
    # Triton's QA ensembles step through `nop_TYPE_FP32_1,2` (L0_infer_reshape).
    assert model_of("/v2/models/nop_TYPE_FP32_1,2/infer") == "nop_TYPE_FP32_1,2"


def test_a_200_character_name_is_a_name_on_both_sides() -> None:
    # It used to be served by `thaw serve` (255) and skipped by `thaw up` (128).
    assert is_model_name("m" * 200)
    assert model_of("/v2/models/" + "m" * 200 + "/infer") == "m" * 200


def test_non_strings_are_not_names_or_versions() -> None:
    assert not is_model_name(None) and not is_model_name(b"add_sub") and not is_model_name(7)
    assert not is_version(1) and not is_version(None)


@pytest.mark.parametrize("text", ["1", "0", "007", "12", str(INT64_MAX)])
def test_versions_are_int64_digits(text: str) -> None:
    assert is_version(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "-1",
        "+1",
        "1.0",
        "1e3",
        " 1",
        "1\n",
        "x",
        "\u0661",  # an Arabic-Indic digit one: isdigit(), not ASCII
        str(INT64_MAX + 1),
        "9" * 19,
        "1" * 20,
    ],
)
def test_versions_that_overflow_int64_or_are_not_digits_are_refused(text: str) -> None:
    assert not is_version(text)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("1", "1"),
        ("01", "1"),  # Triton reads a version with std::stol (observed on 2.51: `01` is 1)
        ("0000000000000000000000000002", "2"),
        ("0", "0"),
        ("00", "0"),
        (str(INT64_MAX), str(INT64_MAX)),
        (str(INT64_MAX + 1), None),
        ("+1", None),
        ("-1", None),
        ("1abc", None),
        (" 1", None),
        ("\u0661", None),  # a digit, but not an ASCII one
        ("", None),
    ],
)
def test_a_versions_canonical_form_is_its_value(text: str, canonical: str | None) -> None:
    assert canonical_version(text) == canonical


def test_a_version_that_is_no_version_is_refused_in_tritons_words() -> None:
    assert version_refusal("-1") == (
        "invalid model version specified '-1' , version should be an integral value > 0"
    )
    assert version_refusal("x") == (
        "failed to get model version from specified version string 'x' (details: stol), "
        "version should be an integral value > 0"
    )


@pytest.mark.parametrize(
    ("path", "model"),
    [
        ("/v2/models/m", "m"),
        ("/v2/models/m/ready", "m"),
        ("/v2/models/m/config", "m"),
        ("/v2/models/m/infer", "m"),
        ("/v2/models/m/versions/2", "m"),
        ("/v2/models/m/versions/2/infer", "m"),
        ("/v2/models/m/generate", "m"),
        ("/v2/models/m/generate_stream", "m"),
        ("/v2/models/m/versions/3/generate_stream", "m"),
        ("/v2/models/m/versions/01/infer", "m"),
        (f"/v2/models/m/versions/{INT64_MAX}/config", "m"),
        ("/v2/models/m.v2-x_y/versions/12/config", "m.v2-x_y"),
    ],
)
def test_a_models_own_paths_name_it(path: str, model: str) -> None:
    assert model_of(path) == model


@pytest.mark.parametrize(
    "path",
    [
        "/v2",
        "/v2/health/ready",
        "/v2/models",
        "/v2/models/",
        "/v2/models/stats",
        "/v2/models/m/stats",
        "/v2/models/m/versions/2/stats",
        "/v2/models/m/versions/x/infer",
        f"/v2/models/m/versions/{INT64_MAX + 1}/infer",
        "/v2/models/m/versions",
        "/v2/models/m/versions/2/infer/more",
        "/v2/models/m/infer/more",
        "/v2/models/m/bogus",
        "/v2/models/../etc/infer",
        "/v2/models/a..b/infer",
        "/v2/models/.hidden",
        "/v2/repository/models/m/load",
        "/metrics",
        "v2/models/m",
        "/V2/models/m",
    ],
)
def test_everything_else_names_no_model(path: str) -> None:
    assert model_of(path) is None


def test_the_calls_that_change_what_serves_are_named_by_their_path() -> None:
    for path in (
        "/v2/repository/models/m/load",
        "/v2/repository/models/m/unload",
        "/thaw/models/m/scale-to-zero",
    ):
        assert changes_serving(path), path
    for path in (
        "/v2/repository/index",
        "/v2/repository/models/m/load/x",
        "/v2/repository/models//load",
        "/v2/repository/models/a/b/load",
        "/v2/models/m/infer",
        "/v2/repository/models/m/loadx",
        "/v2/repository/models/m/load\n",
        "",
        "/" + "a/" * 10_000,
    ):
        assert not changes_serving(path), path
