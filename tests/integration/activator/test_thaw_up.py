"""`thaw up` with real replica processes, driven through tritonclient.http and raw HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient

from tests.fakes.loop import HUNG_AFTER_S
from tests.fixtures.leftover_servers import track
from tests.fixtures.up_process import UpProcess, pid_alive
from tests.integration.activator.up_limits import hold_file
from tests.support.stream_shutdown import across_shutdown
from thawwire.grpc_messages import STREAM_STOPPING

pytestmark = pytest.mark.integration


def _add_sub_inputs(a: np.ndarray, b: np.ndarray) -> list[httpclient.InferInput]:
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        tensor = httpclient.InferInput(name, list(value.shape), "FP32")
        tensor.set_data_from_numpy(value, binary_data=True)
        inputs.append(tensor)
    return inputs


def _identity_body(values: list[float]) -> dict[str, object]:
    return {
        "inputs": [{"name": "INPUT0", "shape": [len(values)], "datatype": "FP32", "data": values}]
    }


async def test_fifty_concurrent_requests_at_zero_all_succeed_with_one_scale_up(
    up: UpProcess,
) -> None:
    assert up.model("add_sub")["state"] == "cold"
    client = aioclient.InferenceServerClient(up.hostport)
    try:
        rng = np.random.default_rng(0)
        pairs = [
            (rng.random(4, dtype=np.float32), rng.random(4, dtype=np.float32)) for _ in range(50)
        ]

        async def one(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            result = await client.infer("add_sub", _add_sub_inputs(a, b))
            return result.as_numpy("OUTPUT0")

        outputs = await asyncio.wait_for(asyncio.gather(*(one(a, b) for a, b in pairs)), 90)
    finally:
        await client.close()
    for (a, b), out in zip(pairs, outputs, strict=True):
        np.testing.assert_allclose(out, a + b, rtol=1e-6)
    metrics = up.metrics()
    assert 'thaw_replica_starts_total{model="add_sub",result="ok"} 1\n' in metrics
    status = up.model("add_sub")
    assert status["state"] == "warm"
    assert status["replicas_ready"] == 1
    assert status["last_cold_start_s"] > 0


async def test_metadata_config_and_readiness_do_not_wake_the_model(up: UpProcess) -> None:
    client = aioclient.InferenceServerClient(up.hostport)
    try:
        assert await client.is_server_ready()
        assert await client.is_model_ready("onnx_add")
        meta = await client.get_model_metadata("onnx_add")
        config = await client.get_model_config("onnx_add")
    finally:
        await client.close()
    assert meta["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}]
    assert config["max_batch_size"] == 8
    assert config["input"][0]["dims"] == [4]
    assert up.model("onnx_add")["replicas_ready"] == 0


async def test_onnx_model_wakes_serves_and_scales_to_zero_after_the_grace(up: UpProcess) -> None:
    client = aioclient.InferenceServerClient(up.hostport)
    try:
        x = np.ones((2, 4), dtype=np.float32)
        tensor = httpclient.InferInput("INPUT0", [2, 4], "FP32")
        tensor.set_data_from_numpy(x)
        first = (await client.infer("onnx_add", [tensor])).as_numpy("OUTPUT0")
        second = (await client.infer("onnx_add", [tensor])).as_numpy("OUTPUT0")
    finally:
        await client.close()
    assert first.shape == (2, 4)
    np.testing.assert_array_equal(first, second)  # same random weights, same replica
    pid = up.model("onnx_add")["replicas"][0]["pid"]
    assert pid_alive(pid)
    # Grace is 1 s: the replica drains and its process exits soon after.
    up.wait_for(lambda: up.model("onnx_add")["state"] == "cold", 20, "scale to zero")
    up.wait_for(lambda: not pid_alive(pid), 10, "the replica process to exit")
    assert 'thaw_model_replicas{model="onnx_add",state="ready"} 0\n' in up.metrics()


async def test_overflow_is_refused_at_once_with_503_and_retry_after(up: UpProcess) -> None:
    url = f"{up.url}/v2/models/overflow/infer"
    async with aiohttp.ClientSession() as session:

        async def one() -> tuple[int, dict[str, object], str | None, float]:
            async with session.post(url, json=_identity_body([1.0])) as r:
                return r.status, await r.json(), r.headers.get("Retry-After"), time.monotonic()

        results = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(6))), 60)
    statuses = sorted(r[0] for r in results)
    refused = [r for r in results if r[0] == 503]
    assert statuses.count(200) >= 2  # the two held ones are served
    assert refused, statuses
    first_served_at = min(r[3] for r in results if r[0] == 200)
    for _, body, retry_after, answered_at in refused:
        assert "max_held_requests" in str(body["error"])
        assert retry_after == "1"
        # Immediate: before any held one was served (a wake, then its 2 s execute), in this
        # run's own order of events, not by a wall-clock bound that a loaded machine outlasts.
        assert answered_at < first_served_at


async def test_model_that_cannot_load_gets_a_clear_error_and_recovers_once_fixed(
    up: UpProcess, up_repo: Path
) -> None:
    url = f"{up.url}/v2/models/broken/infer"
    async with aiohttp.ClientSession() as session:
        start = time.monotonic()
        async with session.post(url, json=_identity_body([1.0, 2.0])) as r:
            assert r.status == 503
            error = (await r.json())["error"]
        assert time.monotonic() - start < 20
        assert "broken" in error and "not FIXED" in error  # the model's own load error
        async with session.get(f"{up.url}/v2/models/broken/ready") as r:
            assert r.status == 503  # honest: the last wake-up failed
        (up_repo / "broken" / "FIXED").write_text("ok")
        try:
            async with session.post(url, json=_identity_body([1.0, 2.0])) as r:
                assert r.status == 200, await r.text()
                body = await r.json()
        finally:
            (up_repo / "broken" / "FIXED").unlink()
    assert body["outputs"][0]["data"] == [1.0, 2.0]
    assert 'thaw_replica_starts_total{model="broken",result="failed"} 1\n' in up.metrics()


def _in_flight_anywhere(model: dict[str, Any]) -> int:
    """A model's requests in flight, through the activator and on direct connections."""
    return int(model["in_flight"]) + sum(r["direct_in_flight"] for r in model["replicas"])


async def test_replica_killed_mid_request_gives_502_then_recovers(
    up: UpProcess, up_repo: Path
) -> None:
    url = f"{up.url}/v2/models/slow/infer"
    stuck = hold_file(up_repo, "slow")
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=_identity_body([5.0])) as r:  # wake it (3 s execute)
            assert r.status == 200
        # The request the replica dies in is held until after the kill, for up to twice the
        # wait below: a 502 within that wait came from the death, promptly, not from the
        # execute's end (a wall-clock bound just past a short execute is one a loaded machine
        # outlasts).
        stuck.write_text(str(2 * HUNG_AFTER_S))
        try:
            request = asyncio.create_task(session.post(url, json=_identity_body([6.0])))
            # In the activator's path, or on the replica: the session's connection, opened at
            # zero, moves to the replica once it is up (activator.direct.move_over).
            await asyncio.to_thread(
                up.wait_for,
                lambda: _in_flight_anywhere(up.model("slow")) == 1,
                HUNG_AFTER_S,
                "the request to be in flight",
            )
            pid = up.model("slow")["replicas"][0]["pid"]
            os.kill(pid, signal.SIGKILL)
        finally:
            stuck.unlink()  # the next replica's executes take 3 s again
        response = await asyncio.wait_for(request, HUNG_AFTER_S)
        assert response.status == 502
        assert "replica" in (await response.json())["error"]
        response.release()
        async with session.post(url, json=_identity_body([7.0])) as r:
            assert r.status == 200
            assert (await r.json())["outputs"][0]["data"] == [7.0]
    assert up.model("slow")["replicas"][0]["pid"] != pid


def test_thaw_status_prints_a_table(up: UpProcess) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "status", "--url", up.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    header, *rows = out.splitlines()
    assert header.split()[:2] == ["MODEL", "STATE"]
    table = rows[: next(i for i, row in enumerate(rows) if row.startswith("warm pool"))]
    names = {row.split()[0]: row.split()[1] for row in table}
    assert set(names) >= {"add_sub", "onnx_add", "overflow", "slow", "broken"}
    assert set(names.values()) <= {"cold", "waking", "warm", "draining", "unavailable"}
    assert names["badcfg"] == "unavailable"
    assert "warm pool:" in out


def test_thaw_status_against_nothing_fails_cleanly() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "thaw.cli",
            "status",
            "--url",
            "http://127.0.0.1:9",
            "--timeout-s",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "cannot read" in result.stderr


def test_invalid_setting_refused_at_start_up(tmp_path: Path, up_repo: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "up", str(up_repo), "--stable-window-s", "3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "`--stable-window-s` = 3, must be in [6, 3600]" in result.stderr


async def test_sigterm_drains_in_flight_requests_and_stops_every_replica(
    tmp_path: Path,
) -> None:
    from tests.fixtures.models import make_slow_execute
    from tests.fixtures.onnx_models import make_onnx_add

    make_slow_execute(tmp_path, "slow", delay_s=1.5)
    make_onnx_add(tmp_path)
    up = UpProcess(
        tmp_path,
        "--warm-pool", "1",
        "--preload-frameworks", "",
        "--cache", str(tmp_path / "cache"),
    )  # fmt: skip
    try:
        # Without --store, images are built into the cache in the background.
        up.wait_for(
            lambda: (
                up.get("/thaw/status")["image_builds"].get("onnx_add")
                not in (None, "queued", "building")
            ),
            60,
            "the background image build",
        )
        builds = up.get("/thaw/status")["image_builds"]
        url = f"{up.url}/v2/models/slow/infer"
        async with aiohttp.ClientSession() as session:

            async def one(v: float) -> tuple[int, object]:
                async with session.post(url, json=_identity_body([v])) as r:
                    return r.status, (await r.json()).get("outputs")

            requests = [asyncio.create_task(one(float(i))) for i in range(3)]
            await asyncio.to_thread(
                up.wait_for, lambda: up.model("slow")["in_flight"] >= 1, 30, "requests in flight"
            )
            pids = [r["pid"] for r in up.model("slow")["replicas"]]
            up.proc.send_signal(signal.SIGTERM)
            results = await asyncio.wait_for(asyncio.gather(*requests), 30)
        assert [status for status, _ in results] == [200, 200, 200]
        assert await asyncio.to_thread(up.proc.wait, 30) == 0
        assert not any(pid_alive(p) for p in pids)
    finally:
        up.stop()
    print("image builds:", builds)
    assert builds["onnx_add"] == "built" or builds["onnx_add"].startswith("failed")


def test_a_kept_alive_connection_is_served_after_sigint(tmp_path: Path) -> None:
    # Triton's L0_lifecycle test_shutdown_with_live_connection through `thaw up`: told to
    # exit, it keeps serving the connection a client holds open, and counts down once.
    from tests.fixtures.models import make_add_sub

    make_add_sub(tmp_path)
    up = UpProcess(tmp_path, "--warm-pool", "1", "--preload-frameworks", "")
    client = httpclient.InferenceServerClient(up.hostport)
    ones = np.ones(4, dtype=np.float32)
    try:
        client.infer("add_sub", _add_sub_inputs(ones, ones))  # at zero: woken
        up.proc.send_signal(signal.SIGINT)
        time.sleep(2)
        result = client.infer("add_sub", _add_sub_inputs(ones, ones))  # the same connection
        assert result.as_numpy("OUTPUT0").tolist() == [2.0] * 4
        client.close()
        assert up.proc.wait(25) == 0, up.log()
    finally:
        client.close()
        up.stop()
    log = up.log_path.read_text(errors="replace")
    assert log.count("Timeout 30: ") == 1, log[-4000:]
    assert "Waiting for in-flight requests to complete." in log


def test_a_grpc_stream_open_across_the_shutdown_answers_what_is_in_flight_only(
    tmp_path: Path,
) -> None:
    # As thaw serve (tests/integration/runtime/test_serve_process.py): told to exit, thaw up
    # answers the stream's request in flight and refuses, in-stream, one sent afterwards.
    from tests.fixtures.models import make_slow_request

    model = make_slow_request(tmp_path, "slow")
    up = UpProcess(tmp_path, "--warm-pool", "1", "--preload-frameworks", "")
    try:
        assert up.grpc_address, up.log()
        results, errors = across_shutdown(
            up.grpc_address,
            model,
            lambda: up.proc.send_signal(signal.SIGINT),
            lambda: "thaw up: stopping" in up.log(),
        )
        assert list(results) == ["in-flight"], (errors, up.log())
        assert results["in-flight"].as_numpy("SLEPT_S").tolist() == [1.5]
        assert len(errors) == 1 and STREAM_STOPPING in errors[0], errors
        assert up.proc.wait(30) == 0, up.log()
    finally:
        up.stop()


def test_a_sigint_during_the_start_stops_it_once_started(tmp_path: Path) -> None:
    # Triton's L0_grpc_state_cleanup interrupts the server a few ms after it listens. The
    # handlers were installed after the listening line, and a signal in between was lost
    # (`thaw up` never stopped, 1 in 10 starts under load); a SIGINT during the start ended
    # it by asyncio's KeyboardInterrupt. Now a signal at any point of the start is kept: the
    # start finishes, then `thaw up` stops as it always does.
    from tests.fixtures.models import make_slow_init

    repo = tmp_path / "repo"
    hold = tmp_path / "slow_init.hold"
    hold.write_text("120")
    make_slow_init(repo, hold_file=hold)
    log_path = tmp_path / "up.log"
    argv = [sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0",
            "--warm-pool", "1", "--preload-frameworks", "",
            "--model-control-mode", "explicit", "--load-model", "slow_init"]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
    track(proc)  # its whole tree goes if the test fails midway
    try:
        deadline = time.monotonic() + HUNG_AFTER_S
        while "scale model=slow_init 0 -> 1" not in log_path.read_text(errors="replace"):
            assert time.monotonic() < deadline and proc.poll() is None, log_path.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)  # the start waits for the model's load (held)
        time.sleep(0.5)
        hold.unlink()
        assert proc.wait(HUNG_AFTER_S) == 0, log_path.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text(errors="replace")
    assert "thaw up: stopping" in text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-4000:]


def test_the_start_lines_are_tritonservers(up: UpProcess) -> None:
    """Launch scripts written for tritonserver wait for its start lines; `thaw up` writes them
    with the addresses it bound."""
    log = up.log_path.read_text(errors="replace")  # the whole log: its start
    assert f"Started HTTPService at {up.hostport}" in log
    assert up.grpc_address and f"Started GRPCInferenceService at {up.grpc_address}" in log
    assert up.metrics_url and f"Started Metrics Service at {up.metrics_url.split('//')[1]}" in log
