"""Every model repository of a command line, the S3 ones (`s3://...`) replaced by local
mirrors: what `thaw serve` and `thaw up` read, and what they sync before each re-read of the
repository (poll, load, index) and remove at exit.

    repositories = localize(["s3://bucket/models", "/local"], parent=..., environ=os.environ)
    repositories.paths      ("/tmp/thaw-s3-repository-x/repository", "/local")
    repositories.sync()     each mirror in line with its bucket (RepositorySourceError)
    repositories.close()    the mirrors removed
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from thawserver.s3_repository.credentials import credentials_for
from thawserver.s3_repository.errors import RepositorySourceError
from thawserver.s3_repository.mirror import RepositoryMirror
from thawserver.s3_repository.url import is_s3_url, parse_s3_url

__all__ = ["MOUNT_DIRECTORY_ENV", "LocalizedRepositories", "localize", "mount_directory"]

logger = logging.getLogger(__name__)

# tritonserver's: where the copies of S3 repositories are made (default: the temp directory).
MOUNT_DIRECTORY_ENV = "TRITON_AWS_MOUNT_DIRECTORY"


class LocalizedRepositories:
    """The repositories in the order given, each S3 one as its mirror's directory."""

    def __init__(self, paths: Sequence[str], mirrors: Sequence[RepositoryMirror]) -> None:
        self.paths = tuple(paths)
        self.mirrors = tuple(mirrors)
        # A forked child (a fork server's) that returns through its parent's code must not
        # remove the parent's mirrors: only the process that made them does.
        self._owner_pid = os.getpid()
        # One sync at a time: a poll and a load call may ask at once, from two threads.
        self._lock = threading.Lock()

    @property
    def any_remote(self) -> bool:
        return bool(self.mirrors)

    def sync(self) -> None:
        """Each mirror in line with its bucket; RepositorySourceError from the first that
        cannot be read (the others are still synced first: one dead bucket does not freeze
        the rest; their errors are logged)."""
        with self._lock:
            failures: list[RepositorySourceError] = []
            for mirror in self.mirrors:
                try:
                    mirror.sync()
                except RepositorySourceError as exc:
                    failures.append(exc)
            for later in failures[1:]:
                logger.warning("%s", later)
            if failures:
                raise failures[0]

    def close(self) -> None:
        """Remove the mirrors (in the process that made them only)."""
        if os.getpid() != self._owner_pid:
            return
        for mirror in self.mirrors:
            mirror.close()


def mount_directory(environ: Mapping[str, str]) -> Path | None:
    """`TRITON_AWS_MOUNT_DIRECTORY` when set (an existing directory), else None: the system's
    temporary directory."""
    given = environ.get(MOUNT_DIRECTORY_ENV)
    return Path(given) if given else None


def localize(
    repositories: Sequence[str], *, parent: Path | None, environ: Mapping[str, str]
) -> LocalizedRepositories:
    """Open and fill a mirror for each S3 repository (first sync: a prefix with no objects is
    refused, as a missing directory); the others pass through. RepositorySourceError with
    nothing left behind when one cannot be read."""
    paths: list[str] = []
    mirrors: list[RepositoryMirror] = []
    try:
        for text in repositories:
            if not is_s3_url(text):
                paths.append(text)
                continue
            url = parse_s3_url(text)
            mirror = RepositoryMirror.open(
                url, parent or _temp_root(), credentials=credentials_for(text, environ)
            )
            mirrors.append(mirror)
            mirror.sync(must_exist=True)
            paths.append(str(mirror.directory))
    except BaseException:
        for mirror in mirrors:
            mirror.close()
        raise
    return LocalizedRepositories(paths, mirrors)


def _temp_root() -> Path:
    return Path(tempfile.gettempdir())
