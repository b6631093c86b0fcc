"""thawserver.s3_repository.keys: an object key lands under the mirror, or is refused by name."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from thawserver.s3_repository.errors import RepositorySourceError
from thawserver.s3_repository.keys import MAX_KEY_DEPTH, mirror_path


def test_keys_under_the_prefix_are_relative_paths() -> None:
    assert mirror_path("models/add_sub/config.pbtxt", "models/") == PurePosixPath(
        "add_sub/config.pbtxt"
    )
    assert mirror_path("add_sub/1/model.py", "") == PurePosixPath("add_sub/1/model.py")


@pytest.mark.parametrize("key", ["models/", "models/add_sub/", "models/add_sub/1/"])
def test_directory_markers_write_nothing(key: str) -> None:
    assert mirror_path(key, "models/") is None


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("models/../etc/passwd", "'..'"),
        ("models/add_sub/../../x", "'..'"),
        ("models/add_sub/1/..", "'..'"),
        ("models/./x", "'.'"),
        ("models//etc/passwd", "absolute path"),
        ("models/a//b", "empty"),
        ("models/a\\..\\b", "backslashes"),
        ("models/a\x00b", "control characters"),
        ("other/add_sub/config.pbtxt", "outside the repository's prefix"),
        ("models/" + "x" * 256, "too long"),
        ("models/" + "d/" * MAX_KEY_DEPTH + "f", "path segments"),
    ],
)
def test_keys_that_escape_or_cannot_be_a_tree_are_refused(key: str, why: str) -> None:
    with pytest.raises(RepositorySourceError, match="object key") as caught:
        mirror_path(key, "models/")
    assert why in str(caught.value)
