"""The one boto3 S3 client configuration: bounded timeouts and retries, checksums only when
required; used by the snapshotter's image store and by model repositories on S3.

boto3's standard configuration applies unchanged (`AWS_ENDPOINT_URL_S3`, region, the
credential chain) unless an endpoint or credentials are given explicitly (a repository URL
`s3://host:port/bucket/...`, a credential file). boto3 is imported on the first client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["S3ClientSettings", "S3Credentials", "make_s3_client"]


@dataclass(frozen=True)
class S3ClientSettings:
    """How a client talks to S3; times in seconds. `max_attempts` counts every try (the first
    included), so a dead endpoint fails after at most that many connects of
    `connect_timeout_s` each (plus the retry mode's backoff)."""

    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    max_attempts: int = 6
    retry_mode: str = "adaptive"  # standard | adaptive (botocore's retry modes)
    max_pool_connections: int = 10


@dataclass(frozen=True)
class S3Credentials:
    """Explicit credentials (tritonserver's S3 credential: environment or credential file).
    Empty strings are absent. With no key pair and no profile, boto3's own chain is used."""

    key_id: str = ""
    secret_key: str = ""
    session_token: str = ""
    region: str = ""
    profile: str = ""

    def __repr__(self) -> str:  # never a secret in a log line or a traceback
        return f"S3Credentials(key_id={self.key_id!r}, region={self.region!r}, ...)"


def make_s3_client(
    settings: S3ClientSettings,
    *,
    endpoint_url: str | None = None,
    credentials: S3Credentials | None = None,
    path_style: bool = False,
) -> Any:
    """A boto3 S3 client with `settings`. `endpoint_url` (None: boto3's configuration),
    `credentials` (None: boto3's chain), `path_style`: bucket in the path, as a custom
    endpoint (MinIO, moto, tritonserver's `s3://host:port/...`) needs. Raises botocore's
    exceptions (the caller translates them into its own error tree)."""
    import boto3
    from botocore.config import Config

    config = Config(
        # botocore's `max_attempts` counts retries after the first try; `total_max_attempts`
        # counts every try, as `max_attempts` here means.
        retries={"mode": settings.retry_mode, "total_max_attempts": settings.max_attempts},  # type: ignore[arg-type]
        connect_timeout=settings.connect_timeout_s,
        read_timeout=settings.read_timeout_s,
        max_pool_connections=settings.max_pool_connections,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        s3={"addressing_style": "path"} if path_style else None,
    )
    profile: str | None = None
    client_args: dict[str, Any] = {"config": config}
    if credentials is not None:
        if credentials.key_id and credentials.secret_key:
            client_args["aws_access_key_id"] = credentials.key_id
            client_args["aws_secret_access_key"] = credentials.secret_key
            if credentials.session_token:
                client_args["aws_session_token"] = credentials.session_token
        elif credentials.profile:
            profile = credentials.profile
        if credentials.region:
            client_args["region_name"] = credentials.region
    if endpoint_url is not None:
        client_args["endpoint_url"] = endpoint_url
    return boto3.session.Session(profile_name=profile).client("s3", **client_args)
