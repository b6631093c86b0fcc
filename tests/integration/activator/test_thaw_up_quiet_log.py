"""A healthy `thaw up` run writes no warning: operators alert on warnings, so a warm-pool
start polled until ready, a wake, a request and a stop asked for must each stay below that."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from tests.fixtures.models import make_add_sub
from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration

_BODY = {
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
    ]
}


def test_a_healthy_start_wake_request_and_stop_log_no_warning(tmp_path: Path) -> None:
    make_add_sub(tmp_path / "repo")
    up = UpProcess(
        tmp_path / "repo", "--warm-pool", "1", "--preload-frameworks", "", "--no-image-build",
        "--log-level", "info",
    )  # fmt: skip
    try:
        response = requests.post(up.url + "/v2/models/add_sub/infer", json=_BODY, timeout=120)
        assert response.status_code == 200, response.text
    finally:
        assert up.stop() == 0
    log = up.log_path.read_text(errors="replace")
    assert "scale model=add_sub 0 -> 1" in log  # the run did what the test says
    warnings = [line for line in log.splitlines() if " WARNING " in line or " ERROR " in line]
    assert warnings == []
