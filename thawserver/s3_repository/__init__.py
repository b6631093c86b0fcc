"""Triton model repositories on S3 (`s3://bucket/path`, `s3://[http[s]://]host:port/bucket/path`),
served by `thaw serve` and `thaw up` from a local mirror they keep in line with the bucket.

    url          tritonserver's S3 repository URL grammar: bucket, prefix, endpoint (pure)
    keys         an object key as a path under the mirror; traversal refused (pure)
    credentials  tritonserver's S3 credentials: `TRITON_CLOUD_CREDENTIAL_PATH`'s file
    errors       the one error of a repository source that cannot be read
    mirror       one repository's local mirror: list, fetch what changed, drop what went
    localize     every repository of a command line, S3 ones replaced by their mirrors

Import each part by its module name; this `__init__` imports nothing (boto3 is imported only
when a mirror makes its client).
"""

from __future__ import annotations

__all__: list[str] = []
