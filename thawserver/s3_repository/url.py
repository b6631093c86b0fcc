"""tritonserver's S3 model repository URL grammar (2.51, core's `S3FileSystem`), pure:

    s3://bucket[/path]                          boto3's endpoint (AWS, or AWS_ENDPOINT_URL_S3)
    s3://host:port/bucket[/path]                that endpoint over HTTP, path-style addressing
    s3://http://host:port/bucket[/path]         the same
    s3://https://host:port/bucket[/path]        that endpoint over HTTPS

As tritonserver: slashes at either end of what follows `s3://` are dropped and runs of slashes
inside it are one. Stricter than tritonserver: `.` and `..` path segments, backslashes and
control characters are refused (a prefix is a place in a bucket, never a way out of one), and
`https://` without `host:port` is refused rather than ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from thawserver.s3_repository.errors import RepositorySourceError

__all__ = ["S3Url", "is_s3_url", "parse_s3_url"]

SCHEME = "s3://"
# tritonserver's custom endpoint: host (letters, digits, `-`, `.`) and a port.
_ENDPOINT = re.compile(r"(?P<host>[0-9A-Za-z.-]+):(?P<port>[0-9]{1,5})")
# S3's bucket names (lowercase, digits, `.`, `-`; 3 to 63), and legacy ones (`_`, capitals).
_BUCKET = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]{0,254}")


@dataclass(frozen=True)
class S3Url:
    """One repository on S3. `prefix`: its key prefix, no slash at either end ('' for the
    bucket's root); `endpoint_url`: the URL's own endpoint (None: boto3's)."""

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None

    def key_prefix(self) -> str:
        """The prefix every object of the repository's keys starts with ('' or `prefix/`)."""
        return f"{self.prefix}/" if self.prefix else ""

    def __str__(self) -> str:
        where = f"{self.endpoint_url.split('://', 1)[1]}/" if self.endpoint_url else ""
        return f"{SCHEME}{where}{self.bucket}{'/' + self.prefix if self.prefix else ''}"


def is_s3_url(text: str) -> bool:
    """Whether a repository as given names S3 (tritonserver's `s3://` prefix)."""
    return text.startswith(SCHEME)


def parse_s3_url(text: str) -> S3Url:
    """`text` as an `S3Url`; RepositorySourceError saying what is wrong with it."""
    if not is_s3_url(text):
        raise RepositorySourceError(f"model repository {text!r}: expected s3://bucket/path")
    rest = text[len(SCHEME) :]
    scheme = ""
    for candidate in ("https://", "http://"):
        if rest.startswith(candidate):
            scheme, rest = candidate, rest[len(candidate) :]
    if any(ord(c) < 0x20 or c in "\\\x7f" for c in rest):
        raise RepositorySourceError(
            f"model repository {text!r}: control characters and backslashes are not allowed"
        )
    parts = [p for p in rest.split("/") if p]
    if not parts:
        raise RepositorySourceError(f"model repository {text!r}: no bucket name found")
    endpoint_url = None
    endpoint = _ENDPOINT.fullmatch(parts[0])
    if endpoint is not None:
        endpoint_url = f"{scheme or 'http://'}{parts[0]}"
        parts = parts[1:]
        if not parts:
            raise RepositorySourceError(
                f"model repository {text!r}: no bucket name found after {endpoint_url}"
            )
    elif scheme:
        raise RepositorySourceError(
            f"model repository {text!r}: {scheme} must be followed by host:port "
            "(s3://https://host:port/bucket/path)"
        )
    bucket, path = parts[0], parts[1:]
    if not _BUCKET.fullmatch(bucket):
        raise RepositorySourceError(f"model repository {text!r}: invalid bucket name {bucket!r}")
    if any(p in (".", "..") for p in path):
        raise RepositorySourceError(
            f"model repository {text!r}: '.' and '..' are not allowed in its path"
        )
    return S3Url(bucket=bucket, prefix="/".join(path), endpoint_url=endpoint_url)
