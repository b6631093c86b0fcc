"""A load call that comes while the server still imports its frameworks (`--preload-frameworks`,
and warm-ups): the HTTP port answers from the first moment, so a script that waits for
`/v2/health/live` and then loads its model must get it loaded, not "Python stub processes need
a running server" (what a load of a Python model answered before the manager had started).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from runtime.config import ModelControlMode, ServeConfig
from runtime.http.app import RUNNER_OPTIONS, build_app
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from tests.fakes.loop import HUNG_AFTER_S
from tests.fixtures.models import make_add_sub


async def test_a_python_model_loads_while_the_server_still_warms_up(tmp_path: Path) -> None:
    make_add_sub(tmp_path)
    config = ServeConfig(repository=tmp_path, model_control_mode=ModelControlMode.EXPLICIT)
    metrics = Metrics()
    manager = ModelManager(config, metrics=metrics)
    preloading = threading.Event()
    release = threading.Event()

    def slow_warmup() -> None:  # as a framework import that takes a while
        preloading.set()
        release.wait(HUNG_AFTER_S)

    app = build_app(config, manager, metrics, warmups=(slow_warmup,))
    server = TestServer(app)
    await server.start_server(**RUNNER_OPTIONS)
    client = TestClient(server)
    try:
        await asyncio.to_thread(preloading.wait, HUNG_AFTER_S)
        assert (await client.get("/v2/health/live")).status == 200
        assert (await client.get("/v2/health/ready")).status != 200  # still warming up
        response = await client.post("/v2/repository/models/add_sub/load")
        assert response.status == 200, await response.text()
        assert (await client.get("/v2/models/add_sub/ready")).status == 200
        body = {
            "inputs": [
                {"name": f"INPUT{i}", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}
                for i in (0, 1)
            ]
        }
        infer = await client.post("/v2/models/add_sub/infer", json=body)
        assert infer.status == 200, await infer.text()
    finally:
        release.set()
        await client.close()
