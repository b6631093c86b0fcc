"""A load's `file:` overrides written out as a model directory, inside `thaw up`'s own directory.

Triton's repository extension lets a load carry a model's files (`file:<version>/<path>`, with a
`config`): the model's directory is then exactly those files. `thaw up` writes them to
`<its directory>/<fresh>/<model>/` so that its index reads the model from there (versions,
metadata, image) while its replicas get the same files in their own load call. Every path is
the client's: each is checked (thawwire.load_overrides), then must land inside that fresh model
directory once resolved (no `..`, no absolute path, no symlink: the directory is made here and
holds nothing but regular files written here), else the load is refused with nothing written.
"""

from __future__ import annotations

import errno
import logging
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from activator.errors import ActivatorError, BadRequest
from thawwire.errors import LoadOverrideError
from thawwire.load_overrides import check_load_path, refused
from thawwire.names import is_model_name

__all__ = ["OverrideFiles"]

logger = logging.getLogger(__name__)

# Write failures that say nothing about the request: the server's disk is the problem.
_SERVER_SIDE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EMFILE})


class OverrideFiles:
    """`thaw up`'s directory of overridden model files: private (0700), made at the first
    override under `parent` (the system's temporary directory by default), removed by
    `close`. Blocking file work: call from a thread."""

    def __init__(self, parent: Path | None = None) -> None:
        self._parent = parent
        self._root: Path | None = None

    @property
    def root(self) -> Path | None:
        """The directory, once made (None before the first override)."""
        return self._root

    def write(self, name: str, files: Mapping[str, bytes]) -> Path:
        """Model `name`'s directory holding exactly `files` (`<version>/<path>` -> contents):
        `<root>/<fresh>/<name>`. BadRequest, in Triton's words, for a path the model directory
        cannot hold (nothing is left written); ActivatorError when the disk fails."""
        if not is_model_name(name):
            raise BadRequest(refused(name[:200], "not a model name"))
        for path in files:
            try:
                check_load_path(path)
            except LoadOverrideError as exc:
                raise BadRequest(refused(name, exc.message)) from None
        holder = Path(tempfile.mkdtemp(prefix="load-", dir=self._ensure_root()))
        model_dir = holder / name
        try:
            model_dir.mkdir()
            for rel, content in files.items():
                _write_one(model_dir, rel, content, name)
        except BaseException:
            shutil.rmtree(holder, ignore_errors=True)
            raise
        return model_dir

    def discard(self, model_dir: Path) -> None:
        """Remove a directory `write` made (a model no longer served from it); any other
        path is left alone."""
        root = self._root
        holder = model_dir.parent
        if root is not None and holder.parent == root and holder.name.startswith("load-"):
            shutil.rmtree(holder, ignore_errors=True)

    def holds(self, directory: Path) -> bool:
        """Whether `directory` is a model directory `write` made."""
        return self._root is not None and directory.parent.parent == self._root

    def close(self) -> None:
        """Remove every override's files (`thaw up` stops)."""
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def _ensure_root(self) -> Path:
        if self._root is None:
            try:
                self._root = Path(tempfile.mkdtemp(prefix="thaw-up-overrides-", dir=self._parent))
            except OSError as exc:
                raise ActivatorError(f"cannot make a directory for load overrides: {exc}") from exc
        return self._root


def _write_one(model_dir: Path, rel: str, content: bytes, name: str) -> None:
    """One file, refused unless it resolves inside `model_dir` (never through a link)."""
    target = model_dir.joinpath(*PurePosixPath(rel).parts)
    base = model_dir.resolve()
    try:
        inside = target.resolve().is_relative_to(base) and target.resolve() != base
        if not inside:
            raise BadRequest(refused(name, f"load file path {rel[:80]!r} is outside the model"))
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.parent.resolve() != target.resolve().parent or target.is_symlink():
            raise BadRequest(refused(name, f"load file path {rel[:80]!r} is outside the model"))
        with open(target, "xb") as file:  # never an existing file, never through a link
            file.write(content)
    except (OSError, UnicodeEncodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        message = refused(
            name,
            f"failed to poll from model repository: load parameter 'file:{rel[:80]}' cannot "
            f"be written: {reason}",
        )
        if isinstance(exc, OSError) and exc.errno in _SERVER_SIDE_ERRNOS:
            raise ActivatorError(message) from exc
        raise BadRequest(message) from exc
