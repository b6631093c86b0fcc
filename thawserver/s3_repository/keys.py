"""An S3 object key of a repository as a path under its local mirror, pure: a key that would
land outside the mirror, or that no directory tree can hold, is refused by name.

    <prefix>/resnet/config.pbtxt       resnet/config.pbtxt
    <prefix>/resnet/1/                 None (a "directory" marker: nothing to write)
    <prefix>/../x, <prefix>//etc, ...  RepositorySourceError naming the key
"""

from __future__ import annotations

from pathlib import PurePosixPath

from thawserver.s3_repository.errors import RepositorySourceError

__all__ = ["MAX_KEY_DEPTH", "mirror_path"]

MAX_KEY_DEPTH = 32  # path segments under the repository: deeper is no model's layout
_MAX_SEGMENT_BYTES = 255  # a file name longer than this cannot be created on Linux


def mirror_path(key: str, key_prefix: str) -> PurePosixPath | None:
    """Where object `key` goes under the mirror (a relative path), or None for a directory
    marker (a key ending in `/`). `key_prefix`: the repository's ('' or ending in `/`).
    RepositorySourceError for a key outside the prefix, an absolute or empty segment, `.`,
    `..`, a backslash, a control character or an over-long name."""
    if not key.startswith(key_prefix):
        raise RepositorySourceError(f"object key {key!r} is outside the repository's prefix")
    relative = key[len(key_prefix) :]
    marker = relative.endswith("/")
    segments = _segments(key, relative.removesuffix("/"))
    if marker or not segments:
        return None
    return PurePosixPath(*segments)


def _segments(key: str, relative: str) -> list[str]:
    """The checked segments of `relative` ([] when it is empty: the prefix's own marker)."""
    if relative == "":
        return []
    if relative.startswith("/"):
        raise RepositorySourceError(f"object key {key!r}: an absolute path is not allowed")
    segments = relative.split("/")
    if len(segments) > MAX_KEY_DEPTH:
        raise RepositorySourceError(
            f"object key {key!r}: {len(segments)} path segments, over {MAX_KEY_DEPTH}"
        )
    for segment in segments:
        if segment in ("", ".", ".."):
            raise RepositorySourceError(
                f"object key {key!r}: empty, '.' and '..' path segments are not allowed"
            )
        if any(ord(c) < 0x20 or c in "\\\x7f" for c in segment):
            raise RepositorySourceError(
                f"object key {key!r}: control characters and backslashes are not allowed"
            )
        if len(segment.encode()) > _MAX_SEGMENT_BYTES:
            raise RepositorySourceError(f"object key {key!r}: a path segment is too long")
    return segments
