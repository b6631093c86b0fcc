"""One S3 model repository's local mirror: the objects under its prefix copied into a
directory the servers read as any repository, brought in line again on each `sync`.

    sync ── (the first: HEAD the bucket) ── list the prefix (every key checked: keys)
         │  ── fetch the objects whose ETag or size changed, each to a temporary file
         │  renamed into place ── delete the files whose objects went, and the directories
         │  left empty
         ├─ no bucket, access denied, no credentials ─ RepositorySourceError, saying so
         ├─ endpoint down or stalled ──────────────── RepositorySourceError after the client's
         │                                            bounded connects/reads and retries
         └─ a hostile key (`..`, absolute, ...) ───── RepositorySourceError naming it; nothing
                                                      written for that sync

A failed sync leaves the mirror as the last good sync left it, but for the objects it had
fetched already (each file is whole: renamed into place). Only files of the mirror's own
directory are written or deleted. Unchanged objects are not fetched again, so a file keeps
its mtime until its object changes (what the servers' change detection reads). Blocking:
callers run it in a thread.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from thawserver.s3_client import S3ClientSettings, S3Credentials, make_s3_client
from thawserver.s3_repository.errors import RepositorySourceError
from thawserver.s3_repository.keys import mirror_path
from thawserver.s3_repository.url import S3Url

__all__ = ["MAX_OBJECTS", "REPOSITORY_CLIENT", "RepositoryMirror", "Synced"]

logger = logging.getLogger(__name__)

MAX_OBJECTS = 100_000  # objects under one repository prefix: more is no model repository
_PIECE_BYTES = 1 << 20

REPOSITORY_CLIENT = S3ClientSettings(
    connect_timeout_s=5.0, read_timeout_s=30.0, max_attempts=3, retry_mode="standard"
)
"""A repository's reads: a dead endpoint is a clear error in seconds, not minutes."""


@dataclass(frozen=True)
class Synced:
    """What one sync changed: files fetched, files deleted, objects listed."""

    fetched: int
    deleted: int
    listed: int


@dataclass(frozen=True)
class _Object:
    path: PurePosixPath  # under the mirror
    key: str
    etag: str
    size: int


class RepositoryMirror:
    """The mirror of repository `url` at `<root>/repository`; `<root>` is this mirror's own
    directory (made by `open`, removed by `close`), `<root>/partial` its temporary files."""

    def __init__(self, url: S3Url, root: Path, client: Any) -> None:
        self.url = url
        self.root = root
        self.directory = root / "repository"
        self._partial = root / "partial"
        self._client = client
        # What each file of the mirror was fetched from: (ETag, size) by its relative path.
        self._fetched: dict[PurePosixPath, tuple[str, int]] = {}
        self.directory.mkdir(exist_ok=True)
        self._partial.mkdir(exist_ok=True)

    @classmethod
    def open(
        cls,
        url: S3Url,
        parent: Path,
        *,
        credentials: S3Credentials | None = None,
        settings: S3ClientSettings = REPOSITORY_CLIENT,
    ) -> RepositoryMirror:
        """A new, empty mirror in a private temporary directory under `parent`."""
        try:
            root = Path(tempfile.mkdtemp(prefix="thaw-s3-repository-", dir=parent))
        except OSError as exc:
            raise RepositorySourceError(
                f"cannot make a directory for the copy of {url} under {parent}: {exc.strerror}"
            ) from None
        try:
            with _translated(url, "creating the S3 client"):
                client = make_s3_client(
                    settings,
                    endpoint_url=url.endpoint_url,
                    credentials=credentials,
                    path_style=url.endpoint_url is not None,
                )
            return cls(url, root, client)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise

    def close(self) -> None:
        """Remove the mirror and its temporary files."""
        shutil.rmtree(self.root, ignore_errors=True)

    def sync(self, *, must_exist: bool = False) -> Synced:
        """Bring the mirror in line with the bucket (module docstring). `must_exist`: an
        empty listing of a prefix (not the bucket's root) is an error, as a repository
        directory that is not there (the start's first sync)."""
        if must_exist:
            self._check_bucket()
        objects = self._list()
        if must_exist and not objects and self.url.prefix:
            raise RepositorySourceError(f"model repository {self.url}: no objects under it")
        fetched = 0
        for obj in objects.values():
            if self._fetched.get(obj.path) != (obj.etag, obj.size) or not self._present(obj):
                self._fetch(obj)
                fetched += 1
        deleted = self._delete_all_but(objects)
        if fetched or deleted:
            logger.info(
                "model repository %s: %d files fetched, %d deleted", self.url, fetched, deleted
            )
        return Synced(fetched=fetched, deleted=deleted, listed=len(objects))

    # -- stages ----------------------------------------------------------------------------
    def _list(self) -> dict[PurePosixPath, _Object]:
        prefix = self.url.key_prefix()
        objects: dict[PurePosixPath, _Object] = {}
        count = 0
        with _translated(self.url, "listing the repository"):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.url.bucket, Prefix=prefix
            )
            for page in pages:
                for item in page.get("Contents", []):
                    count += 1
                    if count > MAX_OBJECTS:
                        raise RepositorySourceError(
                            f"model repository {self.url}: over {MAX_OBJECTS} objects"
                        )
                    path = mirror_path(str(item["Key"]), prefix)
                    if path is None:
                        continue
                    etag, size = str(item.get("ETag", "")), int(item.get("Size", 0))
                    objects[path] = _Object(path, str(item["Key"]), etag, size)
        _refuse_file_and_directory(objects, self.url)
        return objects

    def _check_bucket(self) -> None:
        """HEAD the bucket first, as tritonserver checks its client: a missing bucket and
        refused credentials are told apart by status (a HEAD answer has no body)."""
        with _translated(self.url, _CHECKING_BUCKET):
            self._client.head_bucket(Bucket=self.url.bucket)

    def _present(self, obj: _Object) -> bool:
        local = self.directory / obj.path
        return local.is_file() and not local.is_symlink() and local.stat().st_size == obj.size

    def _fetch(self, obj: _Object) -> None:
        """Object `obj` into its file: a temporary file, renamed into place when whole. Any
        OSError (a full disk) is translated too: no local path reaches a client's error."""
        with _translated(self.url, f"reading {obj.key}"):
            target = self.directory / obj.path
            _make_directories(self.directory, obj.path.parent)
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)  # a directory the bucket now holds a file in place of
            fd, partial = tempfile.mkstemp(dir=self._partial)
            try:
                with os.fdopen(fd, "wb") as out:
                    body = self._client.get_object(Bucket=self.url.bucket, Key=obj.key)["Body"]
                    try:
                        while piece := body.read(_PIECE_BYTES):
                            out.write(piece)
                    finally:
                        body.close()
                os.replace(partial, target)  # whole or not at all: a reader never sees half
            except BaseException:
                Path(partial).unlink(missing_ok=True)
                raise
        self._fetched[obj.path] = (obj.etag, obj.size)

    def _delete_all_but(self, objects: dict[PurePosixPath, _Object]) -> int:
        """Delete the mirror's files no object is for, then its empty directories."""
        deleted = 0
        for here, dirs, files in os.walk(self.directory, topdown=False):
            base = Path(here)
            for name in files:
                path = PurePosixPath((base / name).relative_to(self.directory).as_posix())
                if path not in objects:
                    (base / name).unlink(missing_ok=True)
                    self._fetched.pop(path, None)
                    deleted += 1
            for name in dirs:
                with suppress(OSError):
                    (base / name).rmdir()  # only when empty
        return deleted


def _make_directories(root: Path, relative: PurePosixPath) -> None:
    """`root/relative` as directories, replacing a file the bucket held there before; never
    through a link (the mirror holds none, but a directory is checked before it is used)."""
    here = root
    for part in relative.parts:
        here = here / part
        if here.is_symlink() or here.is_file():
            here.unlink()
        here.mkdir(exist_ok=True)


def _refuse_file_and_directory(objects: dict[PurePosixPath, _Object], url: S3Url) -> None:
    """A key that is both a file and a directory (`m/1` and `m/1/model.onnx`) has no tree."""
    directories = {parent for path in objects for parent in path.parents}
    for path, obj in objects.items():
        if path in directories:
            raise RepositorySourceError(
                f"model repository {url}: object key {obj.key!r} is also a directory"
            )


_CHECKING_BUCKET = "checking the bucket"
_DENIED = ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden")


@contextmanager
def _translated(url: S3Url, what: str) -> Iterator[None]:
    """botocore's exceptions as RepositorySourceError, in words an operator acts on."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        ReadTimeoutError,
    )

    try:
        yield
    except RepositorySourceError:
        raise
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "")) or "unknown"
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        # A HEAD answer has no body, so no code but its status: 404 there is the bucket.
        if code == "NoSuchBucket" or (code == "404" and what == _CHECKING_BUCKET):
            reason = f"bucket '{url.bucket}' does not exist"
        elif code in _DENIED:
            reason = f"access denied ({code}): check the credentials"
        else:
            said = code if code == str(status) else f"{code} ({status})"
            reason = f"S3 answered {said}: {error.get('Message', '')}".rstrip(": ")
        raise RepositorySourceError(f"model repository {url}: {what}: {reason}") from exc
    except NoCredentialsError as exc:
        raise RepositorySourceError(
            f"model repository {url}: {what}: no S3 credentials (AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, a profile, or TRITON_CLOUD_CREDENTIAL_PATH)"
        ) from exc
    except (EndpointConnectionError, ConnectTimeoutError) as exc:
        raise RepositorySourceError(
            f"model repository {url}: {what}: cannot reach the S3 endpoint ({exc})"
        ) from exc
    except ReadTimeoutError as exc:
        raise RepositorySourceError(
            f"model repository {url}: {what}: the S3 endpoint did not answer in time"
        ) from exc
    except BotoCoreError as exc:
        raise RepositorySourceError(f"model repository {url}: {what}: {exc}") from exc
    except OSError as exc:  # the local disk: full, read-only
        raise RepositorySourceError(
            f"model repository {url}: {what}: writing the local copy failed: {exc.strerror}"
        ) from exc
