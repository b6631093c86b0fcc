"""What `/v2` answers: the server's name, its version and its extensions."""

from __future__ import annotations

import functools
import importlib.metadata
from typing import Any

from thawwire.extensions import EXTENSIONS

__all__ = ["DISTRIBUTION", "SERVER_NAME", "server_metadata", "server_version"]

# `/v2` answers Triton's server name: Thaw is a drop-in for Triton, and tools and test suites
# written for Triton check it (qa/L0_http's `test_get_server_metadata`); `version` is Thaw's.
SERVER_NAME = "triton"
DISTRIBUTION = "thaw-serve"  # the installed distribution whose version both sides report


@functools.cache
def server_version() -> str:
    """The installed distribution's version ("0.0.0" when it is not installed); read once
    (it reads the package metadata from disk), then every `/v2` answer reuses it."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


def server_metadata(server_id: str = SERVER_NAME) -> dict[str, Any]:
    """The v2 server metadata JSON of `thaw serve` and `thaw up` alike; its `name` is the
    server's id (tritonserver's `--id`, "triton" by default, as Triton answers)."""
    return {"name": server_id, "version": server_version(), "extensions": list(EXTENSIONS)}
