"""Version directories from a hostile repository: only ASCII decimal int64 names are versions."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonconfig import available_versions

MAX_VERSION = (1 << 63) - 1  # Triton versions are int64


@pytest.mark.parametrize(
    "name",
    ["²", "\u0661", "-1", "..1", "01", "1.0", " 1", "99999999999999999999", str(MAX_VERSION + 1)],
)
def test_a_directory_that_is_no_int64_version_is_not_one(tmp_path: Path, name: str) -> None:
    """Before: `²` (str.isdigit, refused by int) raised ValueError, a load answered 500;
    `99999999999999999999` was loaded as a version no request can name."""
    (tmp_path / "1").mkdir()
    (tmp_path / name).mkdir()
    assert available_versions(tmp_path) == [1]


def test_the_largest_int64_version_and_a_file_named_like_one(tmp_path: Path) -> None:
    (tmp_path / str(MAX_VERSION)).mkdir()
    (tmp_path / "7").write_text("a file, not a version directory")
    assert available_versions(tmp_path) == [MAX_VERSION]
