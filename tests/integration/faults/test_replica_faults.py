"""Replica faults behind a real `thaw up`: a replica SIGKILLed mid-request, one that hangs, a
warm pool process that dies, a model raising MemoryError. Models record every execution in a
file (`make_execution_recorder`), so "not replayed" is read from what the models really ran."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from tests.fakes.loop import HUNG_AFTER_S
from tests.fixtures.up_process import UpProcess, pid_alive
from tests.integration.faults.process_tree import children, wait_all_gone
from tests.integration.faults.up_limits import REQUEST_TIMEOUT_S

pytestmark = pytest.mark.integration


def _body(delay_s: float) -> dict[str, object]:
    return {"inputs": [{"name": "DELAY_S", "datatype": "FP32", "shape": [1], "data": [delay_s]}]}


def _infer(up: UpProcess, model: str, delay_s: float) -> requests.Response:
    return requests.post(f"{up.url}/v2/models/{model}/infer", json=_body(delay_s), timeout=60)


def _in_background(up: UpProcess, model: str, delay_s: float) -> Future[requests.Response]:
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(_infer, up, model, delay_s)
    pool.shutdown(wait=False)
    return future


def _executions(repo: Path, model: str) -> list[tuple[tuple[int, int], float]]:
    """Each execution's (process, its parent) and delay: the replica is one of the two (the
    parent when the model runs in a stub process, the default)."""
    path = repo / model / "executions"
    lines = path.read_text().splitlines() if path.exists() else []
    return [
        ((int(pid), int(ppid)), float(delay))
        for pid, ppid, delay in (line.split() for line in lines)
    ]


def _wait_executions(repo: Path, model: str, count: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while len(_executions(repo, model)) < count:
        assert time.monotonic() < deadline, f"model {model} never ran {count} requests"
        time.sleep(0.02)


def test_a_replica_killed_mid_request_is_a_json_502_and_never_replayed(
    up: UpProcess, faults_repo: Path
) -> None:
    answer = _in_background(up, "victim", 2.0)
    _wait_executions(faults_repo, "victim", 1)
    [(procs, _)] = _executions(faults_repo, "victim")
    [pid] = [r["pid"] for r in up.model("victim")["replicas"]]
    assert pid in procs
    os.kill(pid, signal.SIGKILL)
    r = answer.result(30)
    # On the death: the request deadline, the only timer that could end it otherwise, answers
    # 504 (the status says which, where a wall-clock bound of the deadline's 3 s after the
    # kill is one a loaded machine outlasts).
    assert r.status_code == 502, r.text
    assert "error" in r.json() and "replica" in r.json()["error"]
    # The next request wakes a new replica and succeeds; it is the model's second execution
    # (a replay of the failed one, issued on the failure, would have been the second).
    ok = _infer(up, "victim", 0.0)
    assert ok.status_code == 200, ok.text
    runs = _executions(faults_repo, "victim")
    assert len(runs) == 2 and pid not in runs[1][0]


def test_a_hung_replica_is_a_json_504_at_the_request_deadline(
    up: UpProcess, faults_repo: Path
) -> None:
    _infer(up, "hang", 0.0).raise_for_status()  # warm: the deadline is the request's alone
    started = time.monotonic()
    r = _infer(up, "hang", 60.0)
    took = time.monotonic() - started
    assert r.status_code == 504, r.text
    assert "did not answer" in r.json()["error"] or "timed out" in r.json()["error"]
    # At the deadline: not before it, and not at the 60 s execute's end (a second deadline,
    # a retry elsewhere, would show as another execution below; an upper bound of two
    # deadlines was one a loaded machine outlasts).
    assert REQUEST_TIMEOUT_S <= took < HUNG_AFTER_S, f"504 after {took:.2f} s"
    assert len(_executions(faults_repo, "hang")) == 2  # ran once, never retried elsewhere


def test_a_models_memory_error_fails_only_its_request(up: UpProcess, faults_repo: Path) -> None:
    _infer(up, "oom", 0.0).raise_for_status()
    [(procs, _)] = _executions(faults_repo, "oom")
    r = _infer(up, "oom", -1.0)
    assert r.status_code == 500, r.text
    assert "MemoryError" in r.json()["error"] and "ran out of memory" in r.json()["error"]
    again = _infer(up, "oom", 0.0)
    assert again.status_code == 200, again.text
    assert [p for p, _ in _executions(faults_repo, "oom")] == [procs] * 3  # same process
    assert all(pid_alive(p) for p in procs)


def _pool_pids(up: UpProcess) -> list[int]:
    """Idle warm-pool processes: the fork server's children that serve no model."""
    replicas = {r["pid"] for m in up.get("/thaw/status")["models"] for r in m["replicas"]}
    [fork_server] = children(up.proc.pid)
    return [p for p in children(fork_server) if p not in replicas]


def test_dead_pool_processes_are_replaced_and_wake_ups_still_succeed(up: UpProcess) -> None:
    up.wait_for(lambda: up.get("/thaw/status")["warm_pool"]["ready"] >= 1, 30, "a ready pool")
    before = up.get("/thaw/status")["warm_pool"]
    idle = _pool_pids(up)
    for pid in idle:  # every idle process at once: the pool is dry until it refills
        os.kill(pid, signal.SIGKILL)
    assert not wait_all_gone(idle, 10)
    started = time.monotonic()
    up.wait_for(
        lambda: (
            (pool := up.get("/thaw/status")["warm_pool"])["ready"] >= 1
            and pool["starts"] >= before["starts"] + 1
            and not set(_pool_pids(up)) & set(idle)
        ),
        30,
        "the pool to replace its dead processes",
    )
    replaced_s = time.monotonic() - started
    fresh = _pool_pids(up)
    r = _infer(up, "pooled", 0.0)  # a wake-up claims a replacement
    assert r.status_code == 200, r.text
    [replica] = [x["pid"] for x in up.model("pooled")["replicas"]]
    assert replica in fresh and replica not in idle
    print(f"{len(idle)} pool processes killed, replaced in {replaced_s:.2f} s")


def test_killing_the_dead_pool_process_left_no_zombie(up: UpProcess) -> None:
    """Every child the fork server has is a process someone uses (no unreaped zombies)."""
    [fork_server] = children(up.proc.pid)
    for pid in children(fork_server):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state != "Z", f"pid {pid} is a zombie"
    assert threading.active_count() >= 1
