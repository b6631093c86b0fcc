"""Repository scanning: model names that are never paths, version policies, broken files."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from runtime.errors import ModelNotFound, RepositoryError
from runtime.models.repository import list_models, read_model, select_versions, validate_model_name
from tests.fixtures.models import make_add_sub, write_config
from tests.fixtures.onnx_models import make_onnx_identity


@pytest.mark.parametrize(
    "name",
    ["..", ".", "../etc", "a/b", "/abs", ".hidden", "a\x00b", "a\nb", "", "a b", "x" * 300,
     "a\\b", "..a", "$(rm)", "a;b", "model\n", "add_sub\n"],
)  # fmt: skip
def test_names_that_could_be_paths_are_refused(name: str) -> None:
    with pytest.raises(ModelNotFound):
        validate_model_name(name)


@pytest.mark.parametrize("name", ["add_sub", "resnet50", "bert-base.v2", "M_1"])
def test_plain_names_pass(name: str) -> None:
    assert validate_model_name(name) == name


def _policy(text: str) -> mc.ModelVersionPolicy:
    config = mc.ModelConfig()
    from google.protobuf import text_format

    text_format.Parse(text, config)
    return config.version_policy


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", [7]),
        ("version_policy: { latest: { num_versions: 2 } }", [3, 7]),
        ("version_policy: { all: {} }", [1, 3, 7]),
        ("version_policy: { specific: { versions: [ 1, 7 ] } }", [1, 7]),
    ],
)
def test_version_policies(text: str, expected: list[int]) -> None:
    assert select_versions(_policy(text), [1, 3, 7], "m") == expected


def test_specific_version_that_does_not_exist_is_named() -> None:
    policy = _policy("version_policy: { specific: { versions: [ 4 ] } }")
    with pytest.raises(RepositoryError, match=r"\[4\]"):
        select_versions(policy, [1, 3], "m")


def test_specific_versions_present_are_served_the_missing_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As tritonserver (qa/L0_lifecycle test_file_override: versions [1, 3], only 3 there)."""
    policy = _policy("version_policy: { specific: { versions: [ 1, 4 ] } }")
    assert select_versions(policy, [1, 3], "repo/m") == [1]
    assert "version 4 is specified for model 'm', but the version directory is not present" in (
        caplog.text
    )


def test_model_without_versions_is_an_error(tmp_path: Path) -> None:
    write_config(tmp_path / "empty", 'backend: "python"')
    with pytest.raises(RepositoryError, match="no version directory"):
        read_model(tmp_path, "empty")


def test_missing_model_file_is_named(tmp_path: Path) -> None:
    model_dir = make_add_sub(tmp_path)
    (model_dir / "1" / "model.py").unlink()
    (model_dir / "1" / "other.txt").write_text("x")
    with pytest.raises(RepositoryError, match=r"model file .*1/model.py is missing"):
        read_model(tmp_path, "add_sub")


def test_config_name_must_match_directory(tmp_path: Path) -> None:
    model_dir = make_add_sub(tmp_path)
    text = (model_dir / "config.pbtxt").read_text().replace('"add_sub"', '"other"')
    (model_dir / "config.pbtxt").write_text(text)
    with pytest.raises(RepositoryError, match="does not match directory"):
        read_model(tmp_path, "add_sub")


def test_a_refused_config_is_refused_for_that_before_its_name_is_compared(tmp_path: Path) -> None:
    """Triton's order (qa/L0_model_config's ensemble_scheduling_no_set): the config's own
    refusal, naming the model as the config does, before the directory's name is checked."""
    model_dir = make_add_sub(tmp_path)
    text = (model_dir / "config.pbtxt").read_text().replace('"add_sub"', '"other"')
    (model_dir / "config.pbtxt").write_text(text + "\nmax_batch_size: -1\n")
    with pytest.raises(
        RepositoryError, match="'max_batch_size' must be non-negative value for other"
    ):
        read_model(tmp_path, "add_sub")


def test_non_utf8_config_is_a_clear_error(tmp_path: Path) -> None:
    model_dir = make_add_sub(tmp_path)
    (model_dir / "config.pbtxt").write_bytes(b'name: "add_sub"\n\xff\xfe\xfd')
    with pytest.raises(RepositoryError, match="not UTF-8"):
        read_model(tmp_path, "add_sub")


def test_listing_skips_hidden_and_files(tmp_path: Path) -> None:
    make_add_sub(tmp_path)
    make_onnx_identity(tmp_path, "ident")
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text("hi")
    (tmp_path / "bad name").mkdir()
    (tmp_path / "trailing\n").mkdir()  # `$` would have matched before the newline
    assert list_models(tmp_path) == ["add_sub", "ident"]


def test_unknown_model_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound):
        read_model(tmp_path, "nope")
