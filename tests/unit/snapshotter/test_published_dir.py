"""A directory published whole or not at all: ours renamed into place, or another process's
copy kept; a failed fill leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapshotter.published_dir import publish_dir


def test_the_filled_directory_appears_under_its_name_and_nothing_else_is_left(
    tmp_path: Path,
) -> None:
    dest = publish_dir(tmp_path, "abc", lambda tmp: (tmp / "f").write_text("ours"), what="test")
    assert dest == tmp_path / "abc" and (dest / "f").read_text() == "ours"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["abc"]


def test_a_copy_published_first_is_kept_and_ours_dropped(tmp_path: Path) -> None:
    def fill(tmp: Path) -> None:
        (tmp / "f").write_text("ours")
        (tmp_path / "abc").mkdir()  # another process finishes first, while we fill
        (tmp_path / "abc" / "f").write_text("theirs")

    dest = publish_dir(tmp_path, "abc", fill, what="test")
    assert (dest / "f").read_text() == "theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["abc"]
    # Once there, it is returned as it is: fill is not called again.
    assert publish_dir(tmp_path, "abc", lambda tmp: pytest.fail("filled"), what="test") == dest


def test_a_failed_fill_propagates_and_leaves_nothing(tmp_path: Path) -> None:
    def fill(tmp: Path) -> None:
        (tmp / "half").write_text("x")
        raise ValueError("corrupt")

    with pytest.raises(ValueError, match="corrupt"):
        publish_dir(tmp_path, "abc", fill, what="test")
    assert list(tmp_path.iterdir()) == []
