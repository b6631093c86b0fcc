"""thawserver.s3_repository.url: tritonserver's S3 repository URL grammar, and the paths it
refuses that tritonserver would have taken somewhere unexpected."""

from __future__ import annotations

import pytest

from thawserver.s3_repository.errors import RepositorySourceError
from thawserver.s3_repository.url import S3Url, is_s3_url, parse_s3_url


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("s3://bucket", S3Url("bucket")),
        ("s3://bucket/", S3Url("bucket")),
        ("s3://bucket/models", S3Url("bucket", "models")),
        ("s3://bucket//a///b/", S3Url("bucket", "a/b")),  # slashes cleaned, as tritonserver
        ("s3:///bucket/models", S3Url("bucket", "models")),
        ("s3://demo-bucket1.0/Model_repo-1.0", S3Url("demo-bucket1.0", "Model_repo-1.0")),
        (
            "s3://localhost:4572/demo-bucket1.0/models",
            S3Url("demo-bucket1.0", "models", "http://localhost:4572"),
        ),
        ("s3://127.0.0.1:9000/b", S3Url("b", "", "http://127.0.0.1:9000")),
        ("s3://http://minio.local:9000/b/p", S3Url("b", "p", "http://minio.local:9000")),
        ("s3://https://minio.local:9443/b/p/q", S3Url("b", "p/q", "https://minio.local:9443")),
    ],
)
def test_tritonservers_forms(text: str, expected: S3Url) -> None:
    assert parse_s3_url(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("s3://", "no bucket name"),
        ("s3:////", "no bucket name"),
        ("s3://localhost:4572", "no bucket name found after http://localhost:4572"),
        ("s3://localhost:4572/", "no bucket name found after"),
        ("s3://https://bucket/models", "must be followed by host:port"),
        ("s3://bucket/../other", "'.' and '..' are not allowed"),
        ("s3://bucket/models/./x", "'.' and '..' are not allowed"),
        ("s3://bucket/a\\b", "backslashes"),
        ("s3://bucket/a\nb", "control characters"),
        ("s3://bu cket/models", "invalid bucket name"),
        ("s3://-bucket/models", "invalid bucket name"),
        ("/local/dir", "expected s3://bucket/path"),
    ],
)
def test_refused_with_the_reason(text: str, why: str) -> None:
    with pytest.raises(RepositorySourceError, match=why.replace(".", r"\.")):
        parse_s3_url(text)


def test_key_prefix_and_display() -> None:
    url = parse_s3_url("s3://localhost:4572/b//models/")
    assert url.key_prefix() == "models/"
    assert str(url) == "s3://localhost:4572/b/models"
    assert parse_s3_url("s3://b").key_prefix() == ""
    assert str(parse_s3_url("s3://b")) == "s3://b"


def test_only_the_s3_scheme_is_remote() -> None:
    assert is_s3_url("s3://b/m")
    assert not is_s3_url("/tmp/s3://b")
    assert not is_s3_url("gs://b/m")
