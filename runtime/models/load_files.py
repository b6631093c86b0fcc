"""A load request's `file:<version>/<path>` contents (Triton's model-load override) written out
as a private model repository, and the error when a path cannot be written: the client's 400,
or the server's when its disk is the problem."""

from __future__ import annotations

import errno
import shutil
import tempfile
from pathlib import Path, PurePosixPath

from runtime.errors import InvalidInput, ServingError

__all__ = ["write_load_files"]


def write_load_files(name: str, files: dict[str, bytes]) -> Path:
    """A private repository holding a load request's `file:<version>/<path>` contents.

    The paths come from the request: one that cannot be written (too long a name, a file where
    another path needs a directory) is the client's 400; a full or read-only disk is ours.
    """
    try:
        root = Path(tempfile.mkdtemp(prefix="thaw-load-"))
    except OSError as exc:
        raise ServingError(f"cannot make a directory for the load's files: {exc}") from exc
    model_dir = root / name
    model_dir.mkdir()
    for rel, content in files.items():
        path = PurePosixPath(rel)
        if path.is_absolute() or not path.parts or any(p in ("", ".", "..") for p in path.parts):
            shutil.rmtree(root, ignore_errors=True)
            raise InvalidInput(f"load parameter 'file:{rel}' is not a relative path in the model")
        target = model_dir.joinpath(*path.parts)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        except (OSError, UnicodeEncodeError) as exc:
            shutil.rmtree(root, ignore_errors=True)
            raise _write_error(rel, exc) from exc
    return root


# Write failures that say nothing about the request: the server's disk is the problem.
_SERVER_SIDE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EMFILE})


def _write_error(rel: str, exc: OSError | UnicodeEncodeError) -> ServingError:
    """The error for a `file:` path that could not be written (Triton's text first)."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    message = (
        f"failed to poll from model repository: load parameter 'file:{rel[:80]}' cannot be "
        f"written: {reason}"
    )
    if isinstance(exc, OSError) and exc.errno in _SERVER_SIDE_ERRNOS:
        return ServingError(message)
    return InvalidInput(message)
