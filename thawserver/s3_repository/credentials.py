"""tritonserver's S3 credentials for a repository: the `s3` section of the JSON file that
`TRITON_CLOUD_CREDENTIAL_PATH` names, the entry whose name is the longest prefix of the
repository's URL (`""` matches any); without the file, boto3's own chain, which reads
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_DEFAULT_REGION` and
`AWS_PROFILE` first, as tritonserver does.

    {"s3": {"": {"key_id": "...", "secret_key": "...", "region": "...",
                 "session_token": "", "profile": ""},
            "s3://other-bucket": {...}}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from thawserver.s3_client import S3Credentials
from thawserver.s3_repository.errors import RepositorySourceError

__all__ = ["CREDENTIAL_PATH_ENV", "MAX_CREDENTIAL_FILE_BYTES", "credentials_for"]

CREDENTIAL_PATH_ENV = "TRITON_CLOUD_CREDENTIAL_PATH"
MAX_CREDENTIAL_FILE_BYTES = 1 << 20
_FIELDS = ("key_id", "secret_key", "session_token", "region", "profile")


def credentials_for(url: str, environ: Mapping[str, str]) -> S3Credentials | None:
    """The credentials for repository `url` (as given), or None: boto3's chain. Reads the
    credential file when `environ` names one; RepositorySourceError when it cannot be read or
    is not the documented shape (the message names the file, never a value in it)."""
    path = environ.get(CREDENTIAL_PATH_ENV)
    if not path:
        return None
    section = _s3_section(Path(path))
    names = [name for name in section if url.startswith(name)]
    if not names:
        return None
    name = max(names, key=len)
    entry = section[name]
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k, ""), str) for k in _FIELDS):
        raise RepositorySourceError(
            f"{CREDENTIAL_PATH_ENV} {path}: the s3 entry {name!r} must be an object of strings"
        )
    return S3Credentials(**{field: entry.get(field, "") for field in _FIELDS})


def _s3_section(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_CREDENTIAL_FILE_BYTES + 1)
    except OSError as exc:
        raise RepositorySourceError(
            f"{CREDENTIAL_PATH_ENV} {path}: cannot read it ({exc.strerror})"
        ) from None
    if len(raw) > MAX_CREDENTIAL_FILE_BYTES:
        raise RepositorySourceError(f"{CREDENTIAL_PATH_ENV} {path}: over 1 MiB")
    try:
        document = json.loads(raw)
    except ValueError:
        raise RepositorySourceError(f"{CREDENTIAL_PATH_ENV} {path}: not valid JSON") from None
    if not isinstance(document, dict):
        raise RepositorySourceError(f"{CREDENTIAL_PATH_ENV} {path}: not a JSON object")
    section = document.get("s3", {})
    if not isinstance(section, dict):
        raise RepositorySourceError(f"{CREDENTIAL_PATH_ENV} {path}: 's3' is not an object")
    return section
