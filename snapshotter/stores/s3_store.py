"""S3 image store (boto3): parallel ranged GETs into the caller's buffer, checksummed uploads.

boto3's standard configuration applies unchanged (`AWS_ENDPOINT_URL_S3`, region, credential
chain). Every botocore exception is translated here, once, into the snapshotter's error tree.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from snapshotter.content_address import check_digest
from snapshotter.errors import (
    ImageNotFound,
    ImageRefError,
    IntegrityError,
    ManifestError,
    SnapshotStoreError,
    StoreTimeout,
)
from snapshotter.image_ref import ImageRef
from snapshotter.manifest import MAX_MANIFEST_BYTES
from snapshotter.stores.base import OnBytes, StoredChunk
from snapshotter.stores.s3_body import read_body_into
from thawserver.ranges import out_of_range
from thawserver.s3_client import S3ClientSettings, make_s3_client

logger = logging.getLogger(__name__)

TOUCHES = "chunk-touches"
"""Key prefix (under the store's) of the empty objects that mark a chunk as just reused."""


@dataclass(frozen=True)
class S3Config:
    """Transfer settings; sizes in bytes, times in seconds."""

    max_parallel: int = 8
    range_bytes: int = 16 << 20
    # A range is handed on (digest, cache tee) in pieces of this size as it arrives.
    land_bytes: int = 4 << 20
    # Only where a body cannot be read straight from the socket (see `s3_body`): urllib3 then
    # copies each read through a temporary of this size, small enough to stay cached.
    read_piece_bytes: int = 1 << 20
    part_bytes: int = 16 << 20
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    max_attempts: int = 6
    retry_mode: str = "adaptive"
    stream_retries: int = 3

    def __post_init__(self) -> None:
        if self.retry_mode not in ("standard", "adaptive"):
            raise SnapshotStoreError(
                f"`retry_mode` = {self.retry_mode!r}, must be standard|adaptive"
            )
        problem = out_of_range("max_parallel", self.max_parallel, 1, 256)
        if problem is not None:
            raise SnapshotStoreError(problem)
        if self.land_bytes < 1 << 12 or self.land_bytes % (1 << 12):
            raise SnapshotStoreError(
                f"`land_bytes` = {self.land_bytes}, must be a multiple of 4096"
            )
        if self.part_bytes < 5 << 20:
            raise SnapshotStoreError(f"`part_bytes` = {self.part_bytes}, must be >= {5 << 20}")


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket[/prefix]` -> (bucket, prefix without slashes at either end)."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    if not bucket or any(c in bucket for c in " \\") or ".." in prefix.split("/"):
        raise ImageRefError(f"store URI {uri!r}: expected s3://bucket[/prefix]")
    return bucket, prefix.strip("/")


class S3Store:
    """Images at `<prefix>/images/<model>/<version>/<target>/manifest.json`, chunks (shared
    between versions) at `<prefix>/chunks/<digest>`, reuse marks for gc at
    `<prefix>/chunk-touches/<digest>`."""

    def __init__(self, uri: str, config: S3Config | None = None, *, client: Any = None) -> None:
        self.uri = uri
        self.bucket, self.prefix = parse_s3_uri(uri)
        self.config = config or S3Config()
        self._client = client
        self._client_lock = threading.Lock()

    @property
    def client(self) -> Any:
        with self._client_lock:
            if self._client is None:
                self._client = self._make_client()
            return self._client

    def _make_client(self) -> Any:
        cfg = self.config
        settings = S3ClientSettings(
            connect_timeout_s=cfg.connect_timeout_s,
            read_timeout_s=cfg.read_timeout_s,
            max_attempts=cfg.max_attempts,
            retry_mode=cfg.retry_mode,
            max_pool_connections=max(10, cfg.max_parallel * 2),
        )
        with _translated("creating the S3 client"):
            return make_s3_client(settings)

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    # -- manifests -------------------------------------------------------------------------
    def read_manifest(self, ref: ImageRef) -> bytes:
        from botocore.exceptions import (
            IncompleteReadError,
            ReadTimeoutError,
            ResponseStreamingError,
        )

        key = self._key(ref.key, "manifest.json")
        what = f"reading s3://{self.bucket}/{key}"
        # As for chunks: botocore retries requests, not bodies; a reset or stall mid-body is
        # retried here (the manifest is small: it is read again whole).
        for attempt in range(1, self.config.stream_retries + 1):
            try:
                with _translated(what, missing=ImageNotFound(f"no image {ref} in {self.uri}")):
                    answer = self.client.get_object(Bucket=self.bucket, Key=key)
                    body = answer["Body"]
                    try:
                        # Never more than the parser takes: an object of any size at a
                        # manifest's key is refused by its length, not read into memory.
                        size = answer.get("ContentLength")
                        if isinstance(size, int) and size > MAX_MANIFEST_BYTES:
                            raise ManifestError(f"{what}: {size} bytes, over {MAX_MANIFEST_BYTES}")
                        data = body.read(MAX_MANIFEST_BYTES + 1)
                        if len(data) <= MAX_MANIFEST_BYTES:
                            # The empty read at the end is where botocore checks the body
                            # against its length (a read of `amt` bytes does not): a reset
                            # mid-body is an IncompleteReadError, retried below.
                            data += body.read(1)
                        return bytes(data)
                    finally:
                        body.close()
            except SnapshotStoreError as exc:
                cause = exc.__cause__
                streaming = (ResponseStreamingError, ReadTimeoutError, IncompleteReadError)
                if attempt == self.config.stream_retries or not isinstance(cause, streaming):
                    raise
                logger.debug("retrying the manifest read of %s after %s", ref, cause)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def write_manifest(self, ref: ImageRef, data: bytes) -> None:
        self._put(self._key(ref.key, "manifest.json"), data)

    def delete_manifest(self, ref: ImageRef) -> None:
        with _translated("deleting a manifest"):
            self.client.delete_object(Bucket=self.bucket, Key=self._key(ref.key, "manifest.json"))

    def list_images(self) -> list[ImageRef]:
        refs = []
        for key in self._list(self._key("images") + "/"):
            parts = key.split("/")
            if parts[-1] != "manifest.json" or len(parts) < 4:
                continue
            try:
                refs.append(ImageRef(*parts[-4:-1]))
            except ImageRefError:
                logger.warning("ignoring a manifest at an invalid key %s", key)
        return refs

    # -- chunks ----------------------------------------------------------------------------
    def chunk_size(self, digest: str) -> int | None:
        key = self._key("chunks", check_digest(digest))
        with _translated(f"checking chunk {digest}", missing=None) as box:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
            if "ContentLength" not in head:
                raise SnapshotStoreError(f"S3 answered HEAD of chunk {digest} without a length")
            box.value = int(head["ContentLength"])
        return box.value

    def read_chunk_into(self, digest: str, dest: memoryview, *, on_bytes: OnBytes | None) -> None:
        """Parallel ranged GETs, each landing directly in its slice of `dest`."""
        key = self._key("chunks", check_digest(digest))
        step = self.config.range_bytes
        ranges = [(off, min(step, len(dest) - off)) for off in range(0, len(dest), step)]
        workers = min(self.config.max_parallel, max(1, len(ranges)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="thaw-s3") as pool:
            futures = [
                pool.submit(self._get_range, key, digest, dest, o, n, on_bytes) for o, n in ranges
            ]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                for future in futures:  # the chunk is lost: ranges not started never start
                    future.cancel()
                raise

    def _get_range(
        self,
        key: str,
        digest: str,
        dest: memoryview,
        offset: int,
        nbytes: int,
        on_bytes: OnBytes | None,
    ) -> None:
        from botocore.exceptions import (
            IncompleteReadError,
            ReadTimeoutError,
            ResponseStreamingError,
        )

        landing = _Landing(offset, nbytes, self.config.land_bytes, on_bytes)
        view = dest[offset : offset + nbytes]
        # botocore retries requests, not bodies: a reset or stall mid-body is retried here,
        # asking only for the bytes that did not arrive yet.
        for attempt in range(1, self.config.stream_retries + 1):
            try:
                self._get_range_once(key, digest, view, offset, landing)
                break
            except (ResponseStreamingError, ReadTimeoutError, IncompleteReadError) as exc:
                if attempt == self.config.stream_retries:
                    with _translated(f"reading chunk {digest}"):
                        raise exc
                logger.debug(
                    "retrying range %d of chunk %s from byte %d after %s",
                    offset, digest, landing.got, exc,
                )  # fmt: skip
        landing.finish()

    def _get_range_once(
        self, key: str, digest: str, view: memoryview, offset: int, landing: _Landing
    ) -> None:
        start, end = offset + landing.got, offset + len(view) - 1
        with _translated(
            f"reading chunk {digest}",
            missing=IntegrityError(f"chunk {digest} is missing from {self.uri}", digest=digest),
        ):
            resp = self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end}")
        if int(resp.get("ContentLength", -1)) != end + 1 - start:
            resp["Body"].close()
            raise IntegrityError(
                f"chunk {digest} is shorter than its manifest says (range at {start})",
                digest=digest,
            )
        body = resp["Body"]
        try:
            read_body_into(
                body,
                view[landing.got :],
                piece_bytes=self.config.read_piece_bytes,
                on_read=landing.advance,
            )
        finally:
            body.close()

    def write_chunk(self, digest: str, data: memoryview) -> None:
        key = self._key("chunks", check_digest(digest))
        if len(data) <= self.config.part_bytes:
            self._put(key, data, sha256_b64=_b64(bytes.fromhex(digest)))
        else:
            self._multipart(key, data)

    def list_chunks(self) -> dict[str, int]:
        return {digest: stat.size for digest, stat in self.chunk_stats().items()}

    def chunk_stats(self) -> dict[str, StoredChunk]:
        touched = self._touches()
        out = {}
        for obj in self._list_objects(self._key("chunks") + "/"):
            try:
                digest = check_digest(obj["Key"].rsplit("/", 1)[-1])
            except ManifestError:
                continue
            modified = max(obj["LastModified"].timestamp(), touched.get(digest, 0.0))
            out[digest] = StoredChunk(int(obj["Size"]), modified)
        return out

    def chunk_stat(self, digest: str) -> StoredChunk | None:
        key = self._key("chunks", check_digest(digest))
        with _translated(f"checking chunk {digest}", missing=None) as box:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
            box.value = StoredChunk(int(head["ContentLength"]), head["LastModified"].timestamp())
        if box.value is None:
            return None
        with _translated(f"checking chunk {digest}", missing=0.0) as touch:
            touch.value = self.client.head_object(
                Bucket=self.bucket, Key=self._key(TOUCHES, digest)
            )["LastModified"].timestamp()
        return StoredChunk(box.value.size, max(box.value.modified, touch.value))

    def touch_chunk(self, digest: str) -> bool:
        """S3 cannot refresh an object's LastModified short of rewriting it, so a reuse is
        recorded as an empty object `<prefix>/chunk-touches/<digest>`, whose LastModified
        `chunk_stat(s)` count as the chunk's. Written first, then the chunk's presence
        checked, so a chunk deleted in between is reported absent (and uploaded again)."""
        self._put(self._key(TOUCHES, check_digest(digest)), b"")
        return self.chunk_size(digest) is not None

    def _touches(self) -> dict[str, float]:
        out = {}
        for obj in self._list_objects(self._key(TOUCHES) + "/"):
            out[obj["Key"].rsplit("/", 1)[-1]] = obj["LastModified"].timestamp()
        return out

    def delete_chunk(self, digest: str) -> None:
        with _translated(f"deleting chunk {digest}"):
            self.client.delete_object(
                Bucket=self.bucket, Key=self._key("chunks", check_digest(digest))
            )
            self.client.delete_object(Bucket=self.bucket, Key=self._key(TOUCHES, digest))

    # -- plumbing --------------------------------------------------------------------------
    def _put(self, key: str, data: bytes | memoryview, *, sha256_b64: str | None = None) -> None:
        extra = {"ChecksumSHA256": sha256_b64} if sha256_b64 else {}
        with _translated(f"writing s3://{self.bucket}/{key}"):
            self.client.put_object(Bucket=self.bucket, Key=key, Body=bytes(data), **extra)

    def _multipart(self, key: str, data: memoryview) -> None:
        import hashlib

        step = self.config.part_bytes
        with _translated(f"uploading s3://{self.bucket}/{key}"):
            upload = self.client.create_multipart_upload(
                Bucket=self.bucket, Key=key, ChecksumAlgorithm="SHA256"
            )
        upload_id = upload["UploadId"]

        def part(number: int) -> dict[str, Any]:
            piece = bytes(data[(number - 1) * step : number * step])
            checksum = _b64(hashlib.sha256(piece).digest())
            with _translated(f"uploading part {number} of s3://{self.bucket}/{key}"):
                resp = self.client.upload_part(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number,
                    Body=piece, ChecksumAlgorithm="SHA256", ChecksumSHA256=checksum,
                )  # fmt: skip
            return {"PartNumber": number, "ETag": resp["ETag"], "ChecksumSHA256": checksum}

        count = (len(data) + step - 1) // step
        try:
            with ThreadPoolExecutor(max_workers=self.config.max_parallel) as pool:
                parts = list(pool.map(part, range(1, count + 1)))
            with _translated(f"completing s3://{self.bucket}/{key}"):
                self.client.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                )
        except BaseException:
            with _translated("aborting a multipart upload"):
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            raise

    def _list(self, prefix: str) -> list[str]:
        return [obj["Key"] for obj in self._list_objects(prefix)]

    def _list_objects(self, prefix: str) -> list[dict[str, Any]]:
        out = []
        with _translated(f"listing s3://{self.bucket}/{prefix}"):
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            ):
                out += page.get("Contents", [])
        return out


class _Landing:
    """Reports a range's bytes to `on_bytes` in `piece`-sized steps as they arrive (so the
    digest and the cache tee start on a range before all of it is in), each byte once,
    whatever retries happen in between."""

    def __init__(self, offset: int, nbytes: int, piece: int, on_bytes: OnBytes | None) -> None:
        self.offset, self.nbytes, self.piece, self.on_bytes = offset, nbytes, piece, on_bytes
        self.got = 0  # bytes in place, from the range's start
        self.reported = 0

    def advance(self, n: int) -> None:
        self.got += n
        while self.got - self.reported >= self.piece:
            self._report(self.piece)

    def finish(self) -> None:
        if self.reported < self.nbytes:
            self._report(self.nbytes - self.reported)

    def _report(self, n: int) -> None:
        if self.on_bytes is not None:
            self.on_bytes(self.offset + self.reported, n)
        self.reported += n


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


class _Box:
    value: Any = None


_MISSING_CODES = {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}
_sentinel = object()


@contextmanager
def _translated(what: str, *, missing: Any = _sentinel) -> Iterator[_Box]:
    """Translate botocore exceptions. `missing`: an exception to raise for a 404, or a value
    to leave in the yielded box instead of raising."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        ConnectTimeoutError,
        NoCredentialsError,
        ReadTimeoutError,
    )

    box = _Box()
    try:
        yield box
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in _MISSING_CODES and missing is not _sentinel and code != "NoSuchBucket":
            if isinstance(missing, BaseException):
                raise missing from exc
            box.value = missing
            return
        raise SnapshotStoreError(f"{what}: S3 answered {code or 'an error'}: {exc}") from exc
    except (ConnectTimeoutError, ReadTimeoutError) as exc:
        raise StoreTimeout(f"{what}: S3 timed out ({exc})") from exc
    except NoCredentialsError as exc:
        raise SnapshotStoreError(
            f"{what}: no AWS credentials found (env, profile or role)"
        ) from exc
    except BotoCoreError as exc:
        raise SnapshotStoreError(f"{what}: {exc}") from exc
