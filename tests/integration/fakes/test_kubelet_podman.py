"""The test kubelet's podman mode against the fake API server: containers run from the built
Thaw image as the pod's user, with a read-only root, dropped capabilities, volumes at their real
mount paths (emptyDir group-owned by fsGroup, hostPath as the host has it, configMap files, a
0440 secret readable through fsGroup),
init containers, exec probes inside the container, restarts, the pod IP for a wildcard bind,
and no container left behind. Needs podman and `THAW_TEST_IMAGE` (`make test-image`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kube_manifests import pod
from tests.fakes.kubelet import LocalKubelet
from tests.fakes.kubelet_fixtures import KubeletMode
from tests.fakes.kubelet_podman import RUN_LABEL

pytestmark = [pytest.mark.integration, pytest.mark.image]

NS = "default"

# What a container sees of itself, as one JSON line on stdout.
REPORT = r"""
import json, os
def writable(path):
    try:
        with open(os.path.join(path, "probe"), "w") as f:
            f.write("x")
        return True
    except OSError:
        return False
caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
open("/scratch/made", "w").close()
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "groups": sorted(os.getgroups()), "cap_eff": caps,
    "tmp": writable("/tmp"), "root": writable("/"), "scratch": writable("/scratch"),
    "scratch_file_gid": os.stat("/scratch/made").st_gid, "data": writable("/data"),
    "data_file": open("/data/seed").read(), "conf": open("/etc/conf/nested/key").read(),
    "init": open("/scratch/from-init").read(), "hostname": os.environ["HOSTNAME"],
    "token": open("/etc/token/token").read(), "token_gid": os.stat("/etc/token/token").st_gid,
    "token_mode": oct(os.stat("/etc/token/token").st_mode & 0o7777),
    "token_writable": writable("/etc/token"),
}))
"""


@pytest.fixture
def podman_kubelet(
    podman_image: str, kubelet_factory: Callable[..., LocalKubelet], tmp_path: Path
) -> LocalKubelet:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "seed").write_text("from the host")
    mode = KubeletMode("podman", podman_image)
    return kubelet_factory(**mode.config(host_paths={"/data": data}))


def _containers(kubelet: LocalKubelet) -> list[str]:
    run_id = kubelet.runtime.run_id  # type: ignore[attr-defined]
    listed = subprocess.run(
        ["podman", "ps", "--all", "--quiet", f"--filter=label={RUN_LABEL}={run_id}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return listed.stdout.split()


def _container_names(kubelet: LocalKubelet) -> list[str]:
    run_id = kubelet.runtime.run_id  # type: ignore[attr-defined]
    listed = subprocess.run(
        ["podman", "ps", "--all", "--format", "{{.Names}}", f"--filter=label={RUN_LABEL}={run_id}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return listed.stdout.split()


def _on_host(path: str) -> bool:
    return Path(path).exists()


def _phase(server: FakeKubeApiServer, name: str) -> str | None:
    found = server.get("pods", NS, name)
    return ((found or {}).get("status") or {}).get("phase")


def _status(server: FakeKubeApiServer, name: str) -> dict[str, Any]:
    return (server.get("pods", NS, name) or {}).get("status") or {}


async def test_a_container_runs_as_the_pods_user_on_a_read_only_root_with_real_mounts(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient, podman_kubelet: LocalKubelet
) -> None:
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_config_map(
        NS, {"metadata": {"name": "conf"}, "data": {"key": "from a configmap"}}
    )
    await core.create_namespaced_secret(
        NS, {"metadata": {"name": "token"}, "stringData": {"token": "from a secret"}}
    )
    secure = {
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    mounts = [
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "data", "mountPath": "/data"},
        {"name": "conf", "mountPath": "/etc/conf"},
        {"name": "token", "mountPath": "/etc/token", "readOnly": True},
    ]
    manifest = pod(
        "report",
        {
            "name": "main",
            "image": "thaw",
            "command": ["python", "-c", REPORT],
            "securityContext": secure,
            "volumeMounts": mounts,
        },
        restart_policy="Never",
        volumes=[
            {"name": "scratch", "emptyDir": {}},
            {"name": "data", "hostPath": {"path": "/data", "type": "Directory"}},
            {
                "name": "conf",
                "configMap": {"name": "conf", "items": [{"key": "key", "path": "nested/key"}]},
            },
            {"name": "token", "secret": {"secretName": "token", "defaultMode": 0o440}},
        ],
    )
    manifest["spec"]["securityContext"] = {
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 2000,
        "runAsNonRoot": True,
    }
    manifest["spec"]["initContainers"] = [
        {
            "name": "init",
            "image": "thaw",
            "command": ["sh", "-c", "echo done > /scratch/from-init"],
            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
        }
    ]
    await core.create_namespaced_pod(NS, manifest)
    await eventually(lambda: _phase(kube_apiserver, "report") == "Succeeded", timeout_s=60)
    logs = podman_kubelet.logs(NS, "report")
    seen = json.loads(logs.strip().splitlines()[-1])
    assert (seen["uid"], seen["gid"]) == (10001, 10001), logs
    assert 2000 in seen["groups"]
    assert int(seen["cap_eff"], 16) == 0  # drop ALL
    assert not seen["tmp"] and not seen["root"], "read-only root, no /tmp volume: not writable"
    assert seen["scratch"] and seen["scratch_file_gid"] == 2000, "emptyDir: fsGroup + setgid"
    assert not seen["data"], "a root-owned 0755 hostPath is not the pod user's"
    assert seen["data_file"] == "from the host"
    assert seen["conf"] == "from a configmap"
    assert seen["token"] == "from a secret", "0440, group fsGroup: the pod's user reads it"
    assert (seen["token_gid"], seen["token_mode"]) == (2000, "0o440")
    assert not seen["token_writable"]
    assert seen["init"] == "done\n"
    assert seen["hostname"] == "report"
    (init,) = _status(kube_apiserver, "report")["initContainerStatuses"]
    assert init["state"]["terminated"]["exitCode"] == 0


async def test_run_as_non_root_refuses_a_root_user(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient, podman_kubelet: LocalKubelet
) -> None:
    manifest = pod("rooted", {"name": "main", "image": "thaw", "args": ["--help"]})
    manifest["spec"]["securityContext"] = {"runAsUser": 0, "runAsNonRoot": True}
    await client.CoreV1Api(kube_api).create_namespaced_pod(NS, manifest)

    def waiting() -> str | None:
        statuses = _status(kube_apiserver, "rooted").get("containerStatuses") or [{}]
        return ((statuses[0].get("state") or {}).get("waiting") or {}).get("message")

    message = await eventually(waiting, timeout_s=30)
    assert "runAsNonRoot and image will run as root" in message


async def test_exec_probes_run_inside_the_container_and_an_exit_restarts_it(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient, podman_kubelet: LocalKubelet
) -> None:
    # /opt/thaw/bin/thaw exists only inside the image: the probe passes only in the container.
    script = "touch /tmp/ready; sleep 2; exit 3"
    container = {
        "name": "main",
        "image": "thaw",
        "command": ["sh", "-c", script],
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": {"readOnlyRootFilesystem": True},
        "readinessProbe": {
            "exec": {"command": ["sh", "-c", "test -x /opt/thaw/bin/thaw && test -f /tmp/ready"]}
        },
    }
    manifest = pod("probed", container, volumes=[{"name": "tmp", "emptyDir": {}}])
    await client.CoreV1Api(kube_api).create_namespaced_pod(NS, manifest)

    def ready() -> bool:
        statuses = _status(kube_apiserver, "probed").get("containerStatuses") or [{}]
        return bool(statuses[0].get("ready"))

    assert not _on_host("/opt/thaw/bin/thaw"), "the probe's file must be the image's only"
    await eventually(ready, timeout_s=60)

    def restarted() -> dict[str, Any] | None:
        (status,) = _status(kube_apiserver, "probed")["containerStatuses"]
        return status if status["restartCount"] >= 1 else None

    status = await eventually(restarted, timeout_s=60)
    assert status["lastState"]["terminated"]["exitCode"] == 3


async def test_two_pods_binding_the_wildcard_each_get_their_own_ip_and_leave_nothing(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient, podman_kubelet: LocalKubelet
) -> None:
    core = client.CoreV1Api(kube_api)
    container = {
        "name": "main",
        "image": "thaw",
        "command": ["python", "-m", "http.server", "--bind", "0.0.0.0", "8000"],
        "ports": [{"name": "http", "containerPort": 8000}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}},
    }
    for name in ("web-a", "web-b"):
        await core.create_namespaced_pod(NS, pod(name, container, grace_s=5))

    def ips() -> list[str] | None:
        statuses = [_status(kube_apiserver, n) for n in ("web-a", "web-b")]
        ready = [s for s in statuses if (s.get("containerStatuses") or [{}])[0].get("ready")]
        return [s["podIP"] for s in ready] if len(ready) == 2 else None

    found = await eventually(ips, timeout_s=60)
    assert len(set(found)) == 2
    async with aiohttp.ClientSession() as session:
        for ip in found:
            async with session.get(f"http://{ip}:8000/") as resp:
                assert resp.status == 200
    assert len(_containers(podman_kubelet)) == 2
    for name in ("web-a", "web-b"):
        await core.delete_namespaced_pod(name, NS)
    await eventually(
        lambda: all(kube_apiserver.get("pods", NS, n) is None for n in ("web-a", "web-b")),
        timeout_s=30,
    )
    assert _containers(podman_kubelet) == []


async def test_a_container_whose_podman_client_dies_is_restarted_and_only_one_runs(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient, podman_kubelet: LocalKubelet
) -> None:
    container = {"name": "main", "image": "thaw", "command": ["sleep", "120"]}
    await client.CoreV1Api(kube_api).create_namespaced_pod(NS, pod("orphan", container))

    def running() -> int | None:
        (status,) = _status(kube_apiserver, "orphan").get("containerStatuses") or [{}]
        return podman_kubelet.pid(NS, "orphan") if "running" in status.get("state", {}) else None

    client_pid = await eventually(running, timeout_s=60)
    os.kill(client_pid, signal.SIGKILL)

    def restarted() -> bool:
        (status,) = _status(kube_apiserver, "orphan")["containerStatuses"]
        return status["restartCount"] >= 1 and "running" in status["state"]

    await eventually(restarted, timeout_s=60)
    # Only the restart's container runs (once podman has made it), never two on one pod IP.
    names = await eventually(lambda: _container_names(podman_kubelet), timeout_s=30)
    assert len(names) == 1 and names[0].endswith("-orphan-main-1"), names
