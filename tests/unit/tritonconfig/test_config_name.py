"""tritonserver's `--model-config-name`: which config file a model is read from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tritonconfig.config_name import check_config_name, config_file
from tritonconfig.errors import ModelConfigError


def test_a_custom_config_is_read_where_the_model_has_one(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "h100.pbtxt").write_text("")
    assert config_file(tmp_path, "h100") == tmp_path / "configs" / "h100.pbtxt"
    assert config_file(tmp_path, "h200") == tmp_path / "config.pbtxt"  # none: the default
    assert config_file(tmp_path) == tmp_path / "config.pbtxt"
    assert config_file(tmp_path / "missing", "h100") == tmp_path / "missing" / "config.pbtxt"


def test_something_that_is_not_a_file_there_is_still_chosen(tmp_path: Path) -> None:
    """A directory or FIFO at the custom path is the read's to refuse, not a silent fallback."""
    (tmp_path / "configs" / "gpu.pbtxt").mkdir(parents=True)
    os.mkfifo(tmp_path / "configs" / "fifo.pbtxt")
    assert config_file(tmp_path, "gpu").name == "gpu.pbtxt"
    assert config_file(tmp_path, "fifo").name == "fifo.pbtxt"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "Error: empty argument for --model-config-name"),
        ("../../etc/passwd", "no path separators"),
        ("a/b", "no path separators"),
        ("..", "no path separators"),
        ("a\\b", "no path separators"),
    ],
)
def test_names_that_are_not_plain_file_names_are_refused(name: str, why: str) -> None:
    with pytest.raises(ModelConfigError, match=why.replace("(", r"\(")):
        check_config_name(name)


def test_a_plain_name_is_kept() -> None:
    assert check_config_name("h100") == "h100"
    assert check_config_name("config") == "config"
