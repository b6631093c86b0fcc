"""The test kubelet against the fake API server: pods become real local processes on their own
loopback IPs, with probes, restarts, graceful deletion, env/volume mapping and no leftovers."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kube_manifests import (
    deployment,
    pod,
    python_container,
    thaw_serve_container,
)
from tests.fakes.kubelet import LocalKubelet
from tests.fixtures.models import make_add_sub

pytestmark = pytest.mark.integration

NS = "default"
SLEEP = "import time; time.sleep(120)"
# Ignores SIGTERM, then listens on its pod IP: its readiness probe passes only once the handler
# is in place, so a test that deletes it after Ready really meets a process that ignores TERM.
IGNORE_TERM = (
    "import os, signal, socket, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "s = socket.socket(); s.bind((os.environ['POD_IP'], 7000)); s.listen(); time.sleep(120)"
)
POD_IP = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


def _stubborn() -> dict[str, Any]:
    return python_container(IGNORE_TERM, env=[POD_IP], ports=[7000], readiness_port=7000)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _conditions(p: client.V1Pod) -> dict[str, str]:
    return {c.type: c.status for c in p.status.conditions or []}


async def _ready(core: client.CoreV1Api, name: str, timeout_s: float = 60) -> client.V1Pod:
    async def check() -> bool:
        return _conditions(await core.read_namespaced_pod(name, NS)).get("Ready") == "True"

    await eventually(check, timeout_s=timeout_s, interval_s=0.05)
    return await core.read_namespaced_pod(name, NS)


async def _status(
    core: client.CoreV1Api, name: str, test: Callable[[client.V1Pod], bool], timeout_s: float = 15
) -> client.V1Pod:
    async def check() -> bool:
        return test(await core.read_namespaced_pod(name, NS))

    await eventually(check, timeout_s=timeout_s, interval_s=0.05)
    return await core.read_namespaced_pod(name, NS)


async def _gone(kube_apiserver: FakeKubeApiServer, name: str, timeout_s: float) -> None:
    await eventually(
        lambda: kube_apiserver.get("pods", NS, name) is None, timeout_s=timeout_s, interval_s=0.02
    )


@pytest.fixture
def tiny_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    make_add_sub(repo)
    return repo


async def test_thaw_serve_pod_is_ready_on_its_pod_ip_and_stops_on_delete(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubelet_factory: Callable[..., LocalKubelet],
    tiny_repo: Path,
) -> None:
    kubelet = kubelet_factory(host_paths={"/models": tiny_repo})
    core = client.CoreV1Api(kube_api)
    volumes = [{"name": "models", "hostPath": {"path": "/models"}}]
    await core.create_namespaced_pod(
        NS, pod("runtime", thaw_serve_container(), grace_s=10, volumes=volumes)
    )
    ready = await _ready(core, "runtime")
    ip = ready.status.pod_ip
    assert ip.startswith(kubelet.ip_block + ".") and ip != "127.0.0.1"
    assert ready.spec.node_name == kubelet.config.node_name
    assert ready.status.phase == "Running"
    assert _conditions(ready) == {
        "PodScheduled": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    (container,) = ready.status.container_statuses
    assert (container.ready, container.started, container.restart_count) == (True, True, 0)
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{ip}:8000/v2/health/ready") as resp,
    ):
        assert resp.status == 200
    assert f"THAW_LISTENING http://{ip}:8000" in kubelet.logs(NS, "runtime")

    pid = kubelet.pid(NS, "runtime")
    assert pid is not None and _alive(pid)
    started = time.monotonic()
    await core.delete_namespaced_pod("runtime", NS)
    await _gone(kube_apiserver, "runtime", timeout_s=10)
    assert time.monotonic() - started < 10  # thaw serve exits on SIGTERM, within its grace
    assert not _alive(pid)


async def test_pool_replicas_share_the_container_port_on_distinct_ips(
    kube_api: client.ApiClient,
    kubelet_factory: Callable[..., LocalKubelet],
    tiny_repo: Path,
) -> None:
    kubelet_factory(host_paths={"/models": tiny_repo})
    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    volumes = [{"name": "models", "hostPath": {"path": "/models"}}]
    await apps.create_namespaced_deployment(
        NS,
        deployment(
            "pool",
            thaw_serve_container(),
            replicas=2,
            labels={"thaw.dev/pool": "warm"},
            volumes=volumes,
            grace_s=5,
        ),
    )

    async def ready_ips() -> set[str] | None:
        pods = (await core.list_namespaced_pod(NS, label_selector="thaw.dev/pool=warm")).items
        ips = {p.status.pod_ip for p in pods if _conditions(p).get("Ready") == "True"}
        return ips if len(ips) == 2 else None

    ips = await eventually(ready_ips, timeout_s=60, interval_s=0.05)
    async with aiohttp.ClientSession() as session:
        for ip in ips:
            async with session.get(f"http://{ip}:8000/v2/health/ready") as resp:
                assert resp.status == 200
    await eventually(lambda: _deployment_ready(apps), timeout_s=10)


async def _deployment_ready(apps: client.AppsV1Api) -> bool:
    status = (await apps.read_namespaced_deployment_status("pool", NS)).status
    return status.ready_replicas == 2 and status.available_replicas == 2


async def test_process_ignoring_sigterm_is_killed_after_the_grace_period(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubelet: LocalKubelet,
) -> None:
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_pod(NS, pod("stubborn", _stubborn(), grace_s=1))
    await _ready(core, "stubborn", timeout_s=15)
    pid = kubelet.pid(NS, "stubborn")
    assert pid is not None
    started = time.monotonic()
    marked = await core.delete_namespaced_pod("stubborn", NS)
    assert marked.metadata.deletion_grace_period_seconds == 1
    await _gone(kube_apiserver, "stubborn", timeout_s=10)  # at its 1 s grace, not a 30 s one
    assert time.monotonic() - started >= 1.0  # not before the grace (the wait bounds it above)
    assert not _alive(pid)


async def test_restart_policy_always_restarts_with_a_count(
    kube_api: client.ApiClient,
    kubelet: LocalKubelet,
) -> None:
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_pod(NS, pod("crashy", python_container("raise SystemExit(3)")))
    crashed = await _status(
        core,
        "crashy",
        lambda p: bool(
            p.status.container_statuses and p.status.container_statuses[0].restart_count >= 2
        ),
    )
    status = crashed.status.container_statuses[0]
    assert status.last_state.terminated.exit_code == 3
    assert crashed.status.phase == "Running" and not status.ready


@pytest.mark.parametrize(("code", "phase"), [(0, "Succeeded"), (3, "Failed")])
async def test_restart_policy_never_ends_in_a_terminal_phase(
    kube_api: client.ApiClient,
    kubelet: LocalKubelet,
    code: int,
    phase: str,
) -> None:
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_pod(
        NS, pod("once", python_container(f"raise SystemExit({code})"), restart_policy="Never")
    )
    done = await _status(core, "once", lambda p: p.status.phase in ("Succeeded", "Failed"))
    assert done.status.phase == phase
    status = done.status.container_statuses[0]
    assert status.state.terminated.exit_code == code and status.restart_count == 0


async def test_liveness_failure_restarts_the_container(
    kube_api: client.ApiClient,
    kubelet: LocalKubelet,
) -> None:
    core = client.CoreV1Api(kube_api)
    container = python_container(SLEEP)
    # 2 x 1 s: a fast kubelet probes more often, but still allows those 2 s before a kill.
    container["livenessProbe"] = {
        "tcpSocket": {"port": 9},
        "periodSeconds": 1,
        "failureThreshold": 2,
    }
    await core.create_namespaced_pod(NS, pod("unhealthy", container, grace_s=1))
    restarted = await _status(
        core,
        "unhealthy",
        lambda p: bool(
            p.status.container_statuses and p.status.container_statuses[0].restart_count >= 1
        ),
    )
    # SIGTERMed by the kubelet, not exited by itself: 128 + 15.
    assert restarted.status.container_statuses[0].last_state.terminated.exit_code == 143


async def test_exec_readiness_probe_follows_the_container(
    kube_api: client.ApiClient,
    kubelet: LocalKubelet,
    tmp_path: Path,
) -> None:
    flag = tmp_path / "ready-flag"
    core = client.CoreV1Api(kube_api)
    container = python_container(SLEEP)
    container["readinessProbe"] = {
        "exec": {
            "command": [
                "python",
                "-c",
                f"import os, sys; sys.exit(0 if os.path.exists({str(flag)!r}) else 1)",
            ]
        },
        "failureThreshold": 1,
    }
    await core.create_namespaced_pod(NS, pod("gated", container))
    started = await _status(
        core,
        "gated",
        lambda p: bool(p.status.container_statuses and p.status.container_statuses[0].started),
    )
    assert _conditions(started)["Ready"] == "False"
    flag.touch()
    await _ready(core, "gated", timeout_s=15)
    flag.unlink()
    unready = await _status(core, "gated", lambda p: _conditions(p).get("Ready") == "False")
    assert not unready.status.container_statuses[0].ready


async def test_env_expansion_downward_api_configmap_and_volume_mapping(
    kube_api: client.ApiClient,
    kubelet_factory: Callable[..., LocalKubelet],
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    kubelet_factory(host_paths={"/var/thaw": out})
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_config_map(
        NS, {"metadata": {"name": "settings"}, "data": {"greeting": "hello"}}
    )
    code = (
        "import json, os, sys, time; json.dump({'argv': sys.argv[1:], 'env': dict(os.environ),"
        " 'cwd': os.getcwd()}, open(sys.argv[1], 'w')); time.sleep(120)"
    )
    container = python_container(
        code,
        env=[
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POOL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['pool']"}}},
            {
                "name": "GREETING",
                "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}},
            },
            {"name": "URL", "value": "http://$(POD_IP):8000"},
            {"name": "SCRATCH", "value": "/scratch/tmp"},
        ],
    )
    container.update(
        args=["/out/result.json", "$(GREETING)-$(POD_IP)", "$$(POD_IP)"],
        volumeMounts=[
            {"name": "out", "mountPath": "/out", "subPath": "run1"},
            {"name": "scratch", "mountPath": "/scratch"},
        ],
        workingDir="/scratch",
    )
    volumes = [
        {"name": "out", "hostPath": {"path": "/var/thaw"}},
        {"name": "scratch", "emptyDir": {}},
    ]
    await core.create_namespaced_pod(
        NS, pod("env", container, labels={"pool": "warm"}, volumes=volumes)
    )
    result_file = out / "run1" / "result.json"

    def written() -> dict[str, Any] | None:
        try:
            return dict(json.loads(result_file.read_text()))
        except (OSError, ValueError):
            return None

    result = await eventually(written, timeout_s=15)
    ip = (await core.read_namespaced_pod("env", NS)).status.pod_ip
    assert result["argv"] == [str(result_file), f"hello-{ip}", "$(POD_IP)"]
    env = result["env"]
    assert (env["POD_IP"], env["POOL"], env["GREETING"]) == (ip, "warm", "hello")
    assert env["URL"] == f"http://{ip}:8000" and env["HOSTNAME"] == "env"
    assert env["SCRATCH"].endswith("/volumes/scratch/tmp") and result["cwd"].endswith(
        "/volumes/scratch"
    )


async def test_secret_volume_is_its_decoded_files_at_the_mount_path(
    kube_api: client.ApiClient,
    kubelet: LocalKubelet,
) -> None:
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_secret(
        NS, {"metadata": {"name": "creds"}, "data": {"token": "c2VjcmV0"}}
    )
    code = "import sys, time; print(open(sys.argv[1]).read(), flush=True); time.sleep(120)"
    container = {
        **python_container(code),
        "args": ["/etc/creds/nested/token"],
        "volumeMounts": [{"name": "creds", "mountPath": "/etc/creds", "readOnly": True}],
    }
    source = {"secretName": "creds", "defaultMode": 0o440,
              "items": [{"key": "token", "path": "nested/token"}]}  # fmt: skip
    await core.create_namespaced_pod(
        NS, pod("reader", container, volumes=[{"name": "creds", "secret": source}])
    )
    await eventually(lambda: kubelet.logs(NS, "reader").strip() == "secret", timeout_s=15)


async def test_a_missing_secret_holds_the_container_and_says_so(
    kube_api: client.ApiClient,
    kubelet: LocalKubelet,
) -> None:
    core = client.CoreV1Api(kube_api)
    container = {**python_container(SLEEP), "volumeMounts": [{"name": "s", "mountPath": "/s"}]}
    await core.create_namespaced_pod(
        NS, pod("secretive", container, volumes=[{"name": "s", "secret": {"secretName": "x"}}])
    )
    stuck = await _status(core, "secretive", lambda p: bool(p.status.container_statuses))
    waiting = stuck.status.container_statuses[0].state.waiting
    assert waiting.reason == "CreateContainerConfigError"
    assert waiting.message == 'secret "x" not found'
    assert stuck.status.phase == "Pending"


async def test_unsupported_volume_reports_a_config_error(
    kube_api: client.ApiClient,
    kubelet: LocalKubelet,
) -> None:
    core = client.CoreV1Api(kube_api)
    container = {**python_container(SLEEP), "volumeMounts": [{"name": "c", "mountPath": "/c"}]}
    volume = {"name": "c", "persistentVolumeClaim": {"claimName": "x"}}
    await core.create_namespaced_pod(NS, pod("claimant", container, volumes=[volume]))
    stuck = await _status(core, "claimant", lambda p: bool(p.status.container_statuses))
    waiting = stuck.status.container_statuses[0].state.waiting
    assert waiting.reason == "CreateContainerConfigError"
    assert "persistentVolumeClaim volume" in waiting.message and "secret" in waiting.message
    assert stuck.status.phase == "Pending"


async def test_kubelet_relists_after_its_watch_expires(
    kube_apiserver: FakeKubeApiServer,
    kube_api: client.ApiClient,
    kubelet: LocalKubelet,
) -> None:
    core = client.CoreV1Api(kube_api)
    await eventually(lambda: kube_apiserver.open_watches() == 1, timeout_s=5)
    await core.create_namespaced_config_map(NS, {"metadata": {"name": "noise"}})
    kube_apiserver.compact()
    kube_apiserver.end_watches()  # the kubelet resumes from a compacted version: 410, re-list
    await core.create_namespaced_pod(NS, pod("after", python_container(SLEEP, readiness_port=None)))
    await _ready(core, "after", timeout_s=15)
    watches = [r for r in kube_apiserver.requests if r.verb == "watch"]
    lists = [r for r in kube_apiserver.requests if r.verb == "list" and r.resource == "pods"]
    assert len(watches) >= 2 and len(lists) >= 2


async def test_stopping_the_kubelet_kills_every_process(
    kube_api: client.ApiClient,
    kubelet_factory: Callable[..., LocalKubelet],
) -> None:
    kubelet = kubelet_factory(stop_grace_s=0.5)
    core = client.CoreV1Api(kube_api)
    for name in ("a", "b"):
        await core.create_namespaced_pod(NS, pod(name, _stubborn()))
    for name in ("a", "b"):
        await _ready(core, name, timeout_s=15)
    pids = [kubelet.pid(NS, name) for name in ("a", "b")]
    assert all(pid is not None for pid in pids)
    started = time.monotonic()
    await asyncio.to_thread(kubelet.stop)
    assert time.monotonic() - started < 5
    assert not any(_alive(pid) for pid in pids if pid is not None)
