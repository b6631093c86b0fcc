"""thawserver.s3_client: the one boto3 client configuration (snapshot stores, repositories)
carries its bounded timeouts and retries, and an explicit endpoint, region and addressing."""

from __future__ import annotations

from thawserver.s3_client import S3ClientSettings, S3Credentials, make_s3_client


def test_timeouts_retries_and_pool_are_applied() -> None:
    settings = S3ClientSettings(
        connect_timeout_s=1.5, read_timeout_s=7.0, max_attempts=3, retry_mode="standard",
        max_pool_connections=12,
    )  # fmt: skip
    config = make_s3_client(settings, credentials=S3Credentials(region="eu-west-1")).meta.config
    assert (config.connect_timeout, config.read_timeout) == (1.5, 7.0)
    assert config.retries == {"mode": "standard", "total_max_attempts": 3}
    assert config.max_pool_connections == 12
    assert config.region_name == "eu-west-1"


def test_an_endpoint_of_its_own_is_addressed_by_path() -> None:
    client = make_s3_client(
        S3ClientSettings(),
        endpoint_url="http://127.0.0.1:9000",
        credentials=S3Credentials(key_id="k", secret_key="s", region="us-east-1"),
        path_style=True,
    )
    assert client.meta.endpoint_url == "http://127.0.0.1:9000"
    assert client.meta.config.s3 == {"addressing_style": "path"}
    url = client.generate_presigned_url("get_object", Params={"Bucket": "b", "Key": "m/x"})
    assert url.startswith("http://127.0.0.1:9000/b/m/x?")
