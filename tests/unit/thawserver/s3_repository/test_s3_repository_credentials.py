"""thawserver.s3_repository.credentials: tritonserver's credential file, longest prefix wins;
without it, boto3's own chain (the AWS_* environment first)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from thawserver.s3_client import S3Credentials
from thawserver.s3_repository.credentials import CREDENTIAL_PATH_ENV, credentials_for
from thawserver.s3_repository.errors import RepositorySourceError


def _file(tmp_path: Path, document: object) -> dict[str, str]:
    path = tmp_path / "cloud_credential.json"
    path.write_text(json.dumps(document))
    return {CREDENTIAL_PATH_ENV: str(path)}


def test_without_the_file_boto3s_chain_is_used() -> None:
    assert credentials_for("s3://b/m", {"AWS_ACCESS_KEY_ID": "k"}) is None


def test_the_longest_matching_name_wins(tmp_path: Path) -> None:
    env = _file(
        tmp_path,
        {
            "s3": {
                "": {"key_id": "any", "secret_key": "s0", "region": "us-east-1"},
                "s3://bucket-002": {"key_id": "two", "secret_key": "s2", "session_token": "t"},
            },
            "gs": {"": "/path/to/gcs.json"},
        },
    )
    assert credentials_for("s3://bucket-002/models", env) == S3Credentials(
        key_id="two", secret_key="s2", session_token="t"
    )
    assert credentials_for("s3://other/models", env) == S3Credentials(
        key_id="any", secret_key="s0", region="us-east-1"
    )


def test_no_matching_name_is_boto3s_chain(tmp_path: Path) -> None:
    env = _file(tmp_path, {"s3": {"s3://bucket-002": {"key_id": "k", "secret_key": "s"}}})
    assert credentials_for("s3://other/m", env) is None


@pytest.mark.parametrize(
    ("document", "why"),
    [
        ("not json", "not valid JSON"),
        ([], "not a JSON object"),
        ({"s3": []}, "'s3' is not an object"),
        ({"s3": {"": {"key_id": 1}}}, "must be an object of strings"),
    ],
)
def test_a_bad_file_is_refused_without_its_values(
    tmp_path: Path, document: object, why: str
) -> None:
    path = tmp_path / "c.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    with pytest.raises(RepositorySourceError, match=why):
        credentials_for("s3://b/m", {CREDENTIAL_PATH_ENV: str(path)})


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RepositorySourceError, match="cannot read it"):
        credentials_for("s3://b/m", {CREDENTIAL_PATH_ENV: str(tmp_path / "absent.json")})


def test_secrets_stay_out_of_repr() -> None:
    assert "s3cret" not in repr(S3Credentials(key_id="k", secret_key="s3cret"))
