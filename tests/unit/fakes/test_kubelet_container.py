"""How the test kubelet resolves a container into a local process: `$(VAR)` expansion, the
downward API, ConfigMap env, the `thaw` entrypoint, mountPath rewriting and the pod IP for a
wildcard bind; the probe verdict rule; and podman mode's security-context flags."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.fakes.kubelet import default_entrypoints
from tests.fakes.kubelet_container import (
    ContainerConfigError,
    expand,
    own_address,
    resolve_launch,
)
from tests.fakes.kubelet_podman import PodmanConfig, PodmanRuntime, security_options
from tests.fakes.kubelet_probes import ProbeSpec, ProbeTracker

POD = {
    "metadata": {
        "name": "rt-1",
        "namespace": "models",
        "uid": "u-1",
        "labels": {"thaw.dev/pool": "warm"},
    },
    "spec": {"nodeName": "node-a"},
    "status": {"podIP": "127.9.9.2"},
}


def _resolve(container: dict[str, object], **kwargs: object) -> object:
    options: dict[str, object] = {
        "container": container,
        "mounts": {"/models": Path("/tmp/repo"), "/cache": Path("/tmp/cache")},
        "base_env": {"PATH": "/usr/bin"},
        "entrypoints": default_entrypoints(),
        "image_entrypoint": ("thaw",),
        "configmap": {"settings": {"LOG": "debug"}}.get,
        "default_cwd": Path("/tmp/rootfs"),
        **kwargs,
    }
    return resolve_launch(POD, **options)  # type: ignore[arg-type]


def test_expand_follows_kubernetes_rules() -> None:
    env = {"A": "x", "B": "y"}.get
    assert expand("$(A)-$(B)", env) == "x-y"
    assert expand("$(MISSING)", env) == "$(MISSING)"
    assert expand("$$(A)", env) == "$(A)"
    assert expand("cost $5 $(A", env) == "cost $5 $(A"


def test_thaw_serve_container_resolves_to_this_interpreter() -> None:
    launch = _resolve(
        {
            "name": "runtime",
            "args": ["serve", "/models", "--host", "$(POD_IP)", "--cache=/cache/images"],
            "env": [
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {
                    "name": "POOL",
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['thaw.dev/pool']"}},
                },
                {"name": "URL", "value": "http://$(POD_IP):8000"},
                {
                    "name": "LOG",
                    "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "LOG"}},
                },
                {"name": "CACHE", "value": "/cache/x:/other"},
            ],
        }
    )
    assert launch.argv == (
        sys.executable,
        "-m",
        "thaw.cli",
        "serve",
        "/tmp/repo",
        "--host",
        "127.9.9.2",
        "--cache=/tmp/cache/images",
    )
    assert launch.env["NAME"] == "rt-1" and launch.env["POOL"] == "warm"
    assert launch.env["URL"] == "http://127.9.9.2:8000"
    assert launch.env["LOG"] == "debug"
    assert launch.env["CACHE"] == "/tmp/cache/x:/other"
    assert launch.env["HOSTNAME"] == "rt-1" and launch.env["PATH"] == "/usr/bin"
    assert launch.cwd == Path("/tmp/rootfs")


def test_command_overrides_the_image_entrypoint() -> None:
    launch = _resolve({"name": "c", "command": ["python", "-c", "print(1)"]})
    assert launch.argv == (sys.executable, "-c", "print(1)")


@pytest.mark.parametrize(
    "container",
    [
        {
            "name": "c",
            "env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        },
        {
            "name": "c",
            "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}}],
        },
        {
            "name": "c",
            "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "none", "key": "k"}}}],
        },
        {"name": "c", "workingDir": "/not/mounted"},
    ],
)
def test_unsupported_or_missing_sources_refuse_to_start(container: dict[str, object]) -> None:
    with pytest.raises(ContainerConfigError):
        _resolve(container)


def test_probe_verdict_flips_after_the_thresholds() -> None:
    spec = ProbeSpec.parse(
        {
            "httpGet": {"path": "/ready", "port": "http"},
            "successThreshold": 2,
            "failureThreshold": 3,
        },
        {"ports": [{"name": "http", "containerPort": 8000}]},
        period_s=None,
    )
    assert (spec.port, spec.path, spec.period_s) == (8000, "/ready", 10.0)
    tracker = ProbeTracker(spec, initial=False)
    assert [tracker.observe(ok) for ok in (True, True)] == [False, True]
    assert tracker.passing
    assert [tracker.observe(ok) for ok in (False, False, True, False, False, False)] == [
        False,
        False,
        False,
        False,
        False,
        True,
    ]
    assert not tracker.passing and tracker.failed_out


def test_probe_on_an_unknown_named_port_refuses() -> None:
    with pytest.raises(ContainerConfigError):
        ProbeSpec.parse({"tcpSocket": {"port": "grpc"}}, {"ports": []}, period_s=None)


@pytest.mark.parametrize(
    ("text", "bound"),
    [
        ("0.0.0.0", "127.9.9.2"),
        ("--host=0.0.0.0", "--host=127.9.9.2"),
        ("--peer-host=0.0.0.0", "--peer-host=127.9.9.2"),
        ("10.0.0.0", "10.0.0.0"),
        ("--cidr=10.0.0.0/8", "--cidr=10.0.0.0/8"),
        ("x0.0.0.0", "x0.0.0.0"),
    ],
)
def test_a_wildcard_bind_is_the_pods_own_ip(text: str, bound: str) -> None:
    assert own_address(text, "127.9.9.2") == bound


def test_resolve_launch_binds_a_wildcard_host_to_the_pod_ip() -> None:
    launch = _resolve({"args": ["up", "--host=0.0.0.0", "--peer-host", "0.0.0.0"]})
    assert launch.argv[-3:] == ("--host=127.9.9.2", "--peer-host", "127.9.9.2")  # type: ignore[attr-defined]


CHART_SECURITY = {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001}
LOCKED_DOWN = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def test_the_charts_security_context_becomes_podmans_flags() -> None:
    options = security_options(CHART_SECURITY, {"securityContext": LOCKED_DOWN}, "10001:10001")
    assert options.user == "10001:10001"
    assert options.groups == (10001,)
    assert options.flags == (
        "--read-only",
        "--read-only-tmpfs=false",
        "--cap-drop=ALL",
        "--security-opt=no-new-privileges",
    )


def test_a_container_may_run_as_root_with_named_capabilities_when_it_says_so() -> None:
    root = {
        "runAsUser": 0,
        "runAsNonRoot": False,
        "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]},
    }
    options = security_options(CHART_SECURITY, {"securityContext": root}, "10001:10001")
    assert options.user == "0:10001"  # the pod's runAsGroup still applies
    assert "--cap-add=CHOWN" in options.flags and "--cap-add=FOWNER" in options.flags


@pytest.mark.parametrize(
    ("pod", "image_user", "message"),
    [
        ({"runAsNonRoot": True, "runAsUser": 0}, "10001", "image will run as root"),
        ({"runAsNonRoot": True}, "", "image will run as root"),
        ({"runAsNonRoot": True}, "thaw", "non-numeric user (thaw)"),
    ],
)
def test_run_as_non_root_is_checked_against_the_effective_user(
    pod: dict[str, object], image_user: str, message: str
) -> None:
    with pytest.raises(ContainerConfigError, match=re.escape(message)):
        security_options(pod, {}, image_user)


def test_a_podman_runs_cleanup_removes_its_memory_emptydirs(tmp_path: Path) -> None:
    """The run's directory under the shm root goes with it (it was left behind, empty, in
    /dev/shm after every Kubernetes test run)."""
    runtime = PodmanRuntime(
        PodmanConfig(image="x", podman="false", shm_root=tmp_path), extra_env={}
    )
    (runtime.shm_dir / "pod-a" / "dshm").mkdir(parents=True)
    runtime.cleanup()
    assert list(tmp_path.iterdir()) == []
