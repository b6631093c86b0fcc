"""The warm pool's fork server (runtime/process/zygote.py): one thread when it forks, children that
serve.

A real zygote (`thaw serve REPO --fork-server-fd FD`) driven over its socket with the
protocol of thawwire.pool_protocol, as `thaw up` drives it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.process.zygote import FORK_SAFE_AT_IMPORT, ForkRefused, check_single_threaded
from tests.fixtures.models import make_add_sub
from tests.fixtures.onnx_models import make_onnx_add
from thawwire.handoff_protocol import listening_url, surface_address
from thawwire.pool_protocol import FrameDecoder, Op, encode_frame

pytestmark = pytest.mark.integration


class Zygote:
    """A fork server process and our end of its control socket."""

    def __init__(self, repo: Path, *flags: str) -> None:
        self.sock, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "thaw.cli", "serve", str(repo), *flags,
             "--fork-server-fd", str(theirs.fileno())],
            pass_fds=[theirs.fileno()], stderr=subprocess.PIPE,
        )  # fmt: skip
        theirs.close()
        self._decoder = FrameDecoder()
        self._queue: list[dict[str, Any]] = []
        self.ready = self.next(Op.READY, timeout_s=120)

    def next(self, op: Op, timeout_s: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            for i, message in enumerate(self._queue):
                if message["op"] == op:
                    return self._queue.pop(i)
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            assert data, f"the zygote closed its socket waiting for {op}"
            self._queue += self._decoder.feed(data)

    def fork(self, argv: list[str]) -> tuple[int, Any, Any]:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        request = int(time.monotonic_ns() % 1_000_000)
        socket.send_fds(self.sock, [encode_frame(Op.FORK, id=request, argv=argv)], [out_w, err_w])
        os.close(out_w)
        os.close(err_w)
        answer = self.next(Op.FORKED)
        assert answer["id"] == request
        return answer["pid"], os.fdopen(out_r), os.fdopen(err_r)

    def status(self) -> dict[str, Any]:
        self.sock.sendall(encode_frame(Op.STATUS, id=7))
        return self.next(Op.STATUS)

    def close(self) -> int:
        self.sock.close()
        try:
            return self.proc.wait(15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    make_add_sub(tmp_path / "repo")
    make_onnx_add(tmp_path / "repo")
    return tmp_path / "repo"


@pytest.fixture
def zygote(repo: Path) -> Iterator[Zygote]:
    z = Zygote(repo, "--preload-frameworks", "onnxruntime,torch", "--log-level", "info")
    yield z
    z.close()


def _child_argv(repo: Path) -> list[str]:
    return [str(repo), "--port", "0", "--model-control-mode", "explicit",
            "--preload-frameworks", "onnxruntime,torch", "--log-level", "warning"]  # fmt: skip


def _listening(out: Any) -> str:
    """The child's HTTP address: its stdout's THAW_LISTENING line (other listeners come first)."""
    return _announced(out)["HTTP"]


def _announced(out: Any) -> dict[str, str]:
    """Every address the child announced, up to and including its THAW_LISTENING line."""
    found: dict[str, str] = {}
    for line in out:
        surface = surface_address(line)
        if surface is not None:
            found[surface[0].value] = surface[1]
        url = listening_url(line)
        if url is not None:
            found["HTTP"] = url
            return found
    raise AssertionError(f"the child never printed THAW_LISTENING (saw {found})")


def _wait_ready(url: str, timeout_s: float = 60) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - start
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.01)
    raise AssertionError(f"{url} never ready")


def _post(url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body or {}).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        raw = r.read()
    return json.loads(raw) if raw else {}


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_the_zygote_has_one_thread_when_it_forks_and_its_child_serves(
    zygote: Zygote, repo: Path
) -> None:
    assert zygote.ready["threads"] == 1
    assert zygote.ready["preloaded"] == ["torch"] and zygote.ready["deferred"] == ["onnxruntime"]
    assert _threads(zygote.proc.pid) == 1
    pid, out, _err = zygote.fork(_child_argv(repo))
    url = _listening(out)
    _wait_ready(url)
    assert zygote.status()["threads"] == 1  # the zygote still has only its own thread
    assert os.getsid(pid) == pid  # its own session
    _post(f"{url}/v2/repository/models/onnx_add/load")
    _post(f"{url}/v2/repository/models/add_sub/load")
    answer = _post(f"{url}/v2/models/add_sub/infer", {"inputs": [
        {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 1, 1, 1]},
    ]})  # fmt: skip
    assert {o["name"]: o["data"] for o in answer["outputs"]} == {
        "OUTPUT0": [2, 3, 4, 5], "OUTPUT1": [0, 1, 2, 3]
    }  # fmt: skip
    onnx = _post(
        f"{url}/v2/models/onnx_add/infer",
        {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [0, 0, 0, 0]}]},
    )
    assert len(onnx["outputs"][0]["data"]) == 4
    assert _threads(pid) > 1  # the child made its own thread pools, after the fork
    os.kill(pid, signal.SIGTERM)
    assert zygote.next(Op.EXITED) == {"op": "exited", "pid": pid, "status": 0}


def test_a_forked_child_serves_grpc_and_metrics_on_the_ports_it_announces(
    zygote: Zygote, repo: Path
) -> None:
    import tritonclient.grpc as grpcclient

    # The zygote imported grpc's native core for its children, and still has one thread.
    maps = Path(f"/proc/{zygote.proc.pid}/maps").read_text()
    assert "cygrpc" in maps
    assert zygote.ready["threads"] == 1
    # `thaw up`'s replicas get `--grpc-port 0` (activator.scaler.local.backend.serve_args).
    pid, out, _err = zygote.fork([*_child_argv(repo), "--grpc-port", "0"])
    addresses = _announced(out)
    assert set(addresses) == {"GRPC", "METRICS", "HTTP"}
    _wait_ready(addresses["HTTP"])
    _post(f"{addresses['HTTP']}/v2/repository/models/add_sub/load")
    client = grpcclient.InferenceServerClient(addresses["GRPC"])
    try:
        assert client.is_server_live()
        assert client.is_model_ready("add_sub")
        inputs = [grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
        result = client.infer("add_sub", inputs)
        assert result.as_numpy("OUTPUT0").tolist() == [0, 2, 4, 6]
    finally:
        client.close()
    with urllib.request.urlopen(f"{addresses['METRICS']}/metrics", timeout=10) as r:
        assert b"nv_inference_request_success" in r.read()
    assert zygote.status()["threads"] == 1  # grpc's threads started in the child only
    os.kill(pid, signal.SIGTERM)
    assert zygote.next(Op.EXITED) == {"op": "exited", "pid": pid, "status": 0}


def test_importing_the_grpc_stack_starts_no_thread() -> None:
    # Why the zygote may import it (rule 2): grpc's core starts its threads with the first
    # server or channel. OpenBLAS is held to one thread, as the zygote holds it.
    code = (
        "import os\n"
        "from runtime.process.zygote import _WITH_GRPC\n"
        "import importlib\n"
        "for name in _WITH_GRPC: importlib.import_module(name)\n"
        "print(len(os.listdir('/proc/self/task')))"
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "GRPC_ENABLE_FORK_SUPPORT": "false"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == 1


def test_children_fork_to_ready_fast_and_share_the_framework_pages(
    zygote: Zygote, repo: Path
) -> None:
    children = []
    for _ in range(2):
        started = time.monotonic()
        pid, out, _err = zygote.fork(_child_argv(repo))
        url = _listening(out)
        _wait_ready(url)
        children.append((pid, time.monotonic() - started))
    rollup = Path(f"/proc/{children[0][0]}/smaps_rollup").read_text()
    fields = {line.split()[0]: int(line.split()[1]) for line in rollup.splitlines()[1:]}
    # Most of what the child maps is shared with the zygote and its sibling, copy-on-write.
    assert fields["Shared_Dirty:"] > fields["Private_Dirty:"]
    print("fork -> ready (s):", [round(s, 3) for _, s in children], "PSS kB:", fields["Pss:"])
    assert all(seconds < 30 for _, seconds in children)
    for pid, _ in children:
        os.kill(pid, signal.SIGTERM)
    assert {zygote.next(Op.EXITED)["pid"], zygote.next(Op.EXITED)["pid"]} == {
        pid for pid, _ in children
    }


def test_a_bad_child_command_line_fails_in_the_child_not_the_zygote(
    zygote: Zygote, repo: Path
) -> None:
    pid, _out, err = zygote.fork([str(repo), "--port", "99999"])
    assert zygote.next(Op.EXITED) == {"op": "exited", "pid": pid, "status": 2}
    assert "port" in err.read()
    pid, out, _ = zygote.fork(_child_argv(repo))  # the zygote still forks
    _wait_ready(_listening(out))
    os.kill(pid, signal.SIGKILL)
    assert zygote.next(Op.EXITED)["status"] == -signal.SIGKILL


def test_the_zygote_stops_when_its_socket_closes_and_its_children_keep_serving(
    repo: Path,
) -> None:
    z = Zygote(repo, "--log-level", "info")
    pid, out, _ = z.fork(_child_argv(repo))
    url = _listening(out)
    _wait_ready(url)
    assert z.close() == 0
    _wait_ready(url)  # the child outlives its zygote
    os.kill(pid, signal.SIGTERM)


def test_a_child_stops_when_the_activator_that_started_its_zygote_dies(repo: Path) -> None:
    # An "activator": starts the zygote, has it fork one child, prints the child's pid, waits.
    script = f"""
import sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_zygote import Zygote, _child_argv
from pathlib import Path
z = Zygote(Path({str(repo)!r}))
pid, out, _ = z.fork(_child_argv(Path({str(repo)!r})))
out.readline()
print(pid, flush=True)
time.sleep(600)
"""
    activator = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert activator.stdout is not None
    child = int(activator.stdout.readline())
    os.kill(child, 0)
    activator.kill()  # SIGKILL: no chance to stop anything
    activator.wait()
    deadline = time.monotonic() + 20
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        status = Path(f"/proc/{child}/stat").read_text().split()[2]
        if status == "Z":
            break
        time.sleep(0.1)
    assert (
        not Path(f"/proc/{child}").exists()
        or Path(f"/proc/{child}/stat").read_text().split()[2] == "Z"
    )


@pytest.mark.parametrize("framework", sorted(FORK_SAFE_AT_IMPORT))
def test_the_frameworks_the_zygote_imports_start_no_thread_at_import(framework: str) -> None:
    # The zygote imports only frameworks that start no thread at import (rule 2). Others (e.g.
    # onnxruntime, which starts a thread at import on some machines and not on others) are
    # imported after the fork, so whether they start one does not matter and is not pinned.
    code = f"import os, {framework}; print(len(os.listdir('/proc/self/task')))"
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert int(out.stdout) == 1, f"{framework} started {int(out.stdout) - 1} thread(s) at import"


def test_the_fork_guard_refuses_with_a_second_thread() -> None:
    import threading

    check_single_threaded_in = subprocess.run(
        [
            sys.executable,
            "-c",
            "from runtime.process.zygote import check_single_threaded as c; c()",
        ],
        capture_output=True,
    )
    assert check_single_threaded_in.returncode == 0
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        with pytest.raises(ForkRefused, match="threads"):
            check_single_threaded()
    finally:
        stop.set()
        thread.join()
