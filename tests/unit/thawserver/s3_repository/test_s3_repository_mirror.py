"""thawserver.s3_repository.mirror over an in-memory bucket with behaviour (listing pages,
ETags, bodies, faults): what changed is fetched, what went is deleted, a hostile key or a
failing bucket writes nothing outside the mirror and says why."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from thawserver.s3_repository.errors import RepositorySourceError
from thawserver.s3_repository.localize import localize
from thawserver.s3_repository.mirror import RepositoryMirror
from thawserver.s3_repository.url import parse_s3_url


class FakeBucket:
    """`list_objects_v2` (paginated, `page_size` keys a page) and `get_object` over a dict;
    `fault` (a botocore exception) is raised by every call while set."""

    def __init__(self, name: str = "bucket", page_size: int = 2) -> None:
        self.name = name
        self.objects: dict[str, bytes] = {}
        self.page_size = page_size
        self.fault: Exception | None = None
        self.gets: list[str] = []

    def get_paginator(self, operation: str) -> FakeBucket:
        assert operation == "list_objects_v2"
        return self

    def paginate(self, *, Bucket: str, Prefix: str) -> Iterator[dict[str, Any]]:
        self._check(Bucket)
        keys = sorted(k for k in self.objects if k.startswith(Prefix))
        for start in range(0, max(len(keys), 1), self.page_size):
            yield {
                "Contents": [
                    {
                        "Key": key,
                        "Size": len(self.objects[key]),
                        "ETag": f'"{hashlib.md5(self.objects[key]).hexdigest()}"',
                    }
                    for key in keys[start : start + self.page_size]
                ]
            }

    def head_bucket(self, *, Bucket: str) -> dict[str, Any]:
        if self.fault is not None:
            raise self.fault
        if Bucket != self.name:  # a HEAD answer has no body: only its status
            raise ClientError({"Error": {"Code": "404", "Message": "Not Found"}}, "HeadBucket")
        return {}

    def get_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        self._check(Bucket)
        self.gets.append(Key)
        return {"Body": io.BytesIO(self.objects[Key])}

    def _check(self, bucket: str) -> None:
        if self.fault is not None:
            raise self.fault
        if bucket != self.name:
            raise ClientError(
                {"Error": {"Code": "NoSuchBucket", "Message": "gone"}}, "ListObjectsV2"
            )


@pytest.fixture
def bucket() -> FakeBucket:
    fake = FakeBucket()
    fake.objects = {
        "models/add_sub/config.pbtxt": b'name: "add_sub"',
        "models/add_sub/1/": b"",  # a console's "folder"
        "models/add_sub/1/model.py": b"# v1",
        "elsewhere/x": b"not the repository's",
    }
    return fake


def _mirror(
    tmp_path: Path, bucket: FakeBucket, url: str = "s3://bucket/models"
) -> RepositoryMirror:
    root = tmp_path / f"mirror-{len(list(tmp_path.iterdir()))}"
    root.mkdir()
    return RepositoryMirror(parse_s3_url(url), root, bucket)


def _files(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in directory.rglob("*")
        if p.is_file()
    }


def test_the_first_sync_copies_the_prefix_only(tmp_path: Path, bucket: FakeBucket) -> None:
    mirror = _mirror(tmp_path, bucket)
    synced = mirror.sync(must_exist=True)
    assert _files(mirror.directory) == {
        "add_sub/config.pbtxt": b'name: "add_sub"',
        "add_sub/1/model.py": b"# v1",
    }
    assert (synced.fetched, synced.deleted, synced.listed) == (2, 0, 2)


def test_a_later_sync_fetches_only_what_changed_and_drops_what_went(
    tmp_path: Path, bucket: FakeBucket
) -> None:
    mirror = _mirror(tmp_path, bucket)
    mirror.sync()
    config = mirror.directory / "add_sub" / "config.pbtxt"
    mtime = config.stat().st_mtime_ns
    bucket.gets.clear()
    bucket.objects["models/add_sub/1/model.py"] = b"# v2, longer"
    bucket.objects["models/ident/config.pbtxt"] = b'name: "ident"'
    synced = mirror.sync()
    assert sorted(bucket.gets) == ["models/add_sub/1/model.py", "models/ident/config.pbtxt"]
    assert config.stat().st_mtime_ns == mtime  # unchanged: a poll sees no change
    assert (synced.fetched, synced.deleted) == (2, 0)

    for key in [k for k in bucket.objects if k.startswith("models/add_sub/")]:
        del bucket.objects[key]
    synced = mirror.sync()
    assert _files(mirror.directory) == {"ident/config.pbtxt": b'name: "ident"'}
    assert not (mirror.directory / "add_sub").exists()  # its empty directories too
    assert synced.deleted == 2


def test_a_file_deleted_locally_is_fetched_again(tmp_path: Path, bucket: FakeBucket) -> None:
    mirror = _mirror(tmp_path, bucket)
    mirror.sync()
    (mirror.directory / "add_sub" / "1" / "model.py").unlink()
    assert mirror.sync().fetched == 1
    assert (mirror.directory / "add_sub" / "1" / "model.py").read_bytes() == b"# v1"


@pytest.mark.parametrize(
    "key", ["models/../escaped", "models/add_sub/../../escaped", "models//escaped"]
)
def test_a_traversal_key_is_refused_and_nothing_is_written(
    tmp_path: Path, bucket: FakeBucket, key: str
) -> None:
    bucket.objects[key] = b"owned"
    mirror = _mirror(tmp_path, bucket)
    with pytest.raises(RepositorySourceError, match="object key"):
        mirror.sync()
    assert _files(mirror.directory) == {}
    assert not any(p.name == "escaped" for p in tmp_path.rglob("*"))


def test_a_key_that_is_both_file_and_directory_is_refused(
    tmp_path: Path, bucket: FakeBucket
) -> None:
    bucket.objects["models/add_sub/1"] = b"a file where a directory is"
    with pytest.raises(RepositorySourceError, match="is also a directory"):
        _mirror(tmp_path, bucket).sync()


def test_s3_faults_are_named(tmp_path: Path, bucket: FakeBucket) -> None:
    with pytest.raises(RepositorySourceError, match="bucket 'nope' does not exist"):
        _mirror(tmp_path, bucket, "s3://nope/models").sync()
    with pytest.raises(RepositorySourceError, match="checking the bucket: bucket 'nope' does"):
        _mirror(tmp_path, bucket, "s3://nope/models").sync(must_exist=True)
    with pytest.raises(RepositorySourceError, match="checking the bucket: bucket 'nope' does not"):
        _mirror(tmp_path, bucket, "s3://nope/models").sync(must_exist=True)
    bucket.fault = ClientError({"Error": {"Code": "AccessDenied"}}, "ListObjectsV2")
    with pytest.raises(RepositorySourceError, match="access denied"):
        _mirror(tmp_path, bucket).sync()
    bucket.fault = EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
    with pytest.raises(RepositorySourceError, match="cannot reach the S3 endpoint"):
        _mirror(tmp_path, bucket).sync()
    bucket.fault = ReadTimeoutError(endpoint_url="http://127.0.0.1:1")
    with pytest.raises(RepositorySourceError, match="did not answer in time"):
        _mirror(tmp_path, bucket).sync()


def test_a_local_write_failure_is_said_without_a_local_path(
    tmp_path: Path, bucket: FakeBucket
) -> None:
    mirror = _mirror(tmp_path, bucket)
    partial = mirror.root / "partial"  # where temporary files go (the class's layout)
    partial.rmdir()
    partial.write_bytes(b"")  # as a full or read-only disk (root ignores modes): no file made
    with pytest.raises(RepositorySourceError, match="writing the local copy failed") as caught:
        mirror.sync()
    assert str(tmp_path) not in str(caught.value)


def test_a_failed_sync_keeps_the_last_good_copy(tmp_path: Path, bucket: FakeBucket) -> None:
    mirror = _mirror(tmp_path, bucket)
    mirror.sync()
    bucket.fault = EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
    with pytest.raises(RepositorySourceError):
        mirror.sync()
    assert set(_files(mirror.directory)) == {"add_sub/config.pbtxt", "add_sub/1/model.py"}


def test_an_empty_prefix_is_refused_at_the_start_only(tmp_path: Path, bucket: FakeBucket) -> None:
    mirror = _mirror(tmp_path, bucket, "s3://bucket/absent")
    with pytest.raises(RepositorySourceError, match="no objects under it"):
        mirror.sync(must_exist=True)
    assert mirror.sync().listed == 0  # later (a poll): every model removed


def test_localize_leaves_local_repositories_and_cleans_up_on_failure(tmp_path: Path) -> None:
    local = localize([str(tmp_path / "local")], parent=tmp_path, environ={})
    assert local.paths == (str(tmp_path / "local"),) and not local.any_remote
    credentials = tmp_path / "credentials.json"
    credentials.write_text('{"s3": {"": {"key_id": "k", "secret_key": "s", "region": "x"}}}')
    env = {"TRITON_CLOUD_CREDENTIAL_PATH": str(credentials)}
    parent = tmp_path / "mount"
    parent.mkdir()
    with pytest.raises(RepositorySourceError, match="cannot reach the S3 endpoint"):
        localize(["s3://127.0.0.1:1/bucket/models"], parent=parent, environ=env)
    assert os.listdir(parent) == []  # nothing left behind
