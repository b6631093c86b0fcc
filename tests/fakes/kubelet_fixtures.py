"""Pytest fixtures for the test kubelet's two modes: `kubelet_mode` ("process": pods as local
processes of this checkout; "podman": pods from the built image, `THAW_TEST_IMAGE`) and
`podman_image`. Parametrize a test over both with `KUBELET_MODES`; the podman case carries the
`image` marker (run by `make test-image`) and skips, saying why, without podman or the image.

    @pytest.mark.parametrize("kubelet_mode", KUBELET_MODES, indirect=True)
    async def test_x(kubelet_mode: KubeletMode, kubelet_factory, ...):
        kubelet_factory(**kubelet_mode.config(host_paths=..., kubeconfig=path))
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.kubelet_podman import PodmanConfig, podman_missing

__all__ = ["IMAGE_ENV", "KUBELET_MODES", "KubeletMode", "kubelet_mode", "podman_image"]

IMAGE_ENV = "THAW_TEST_IMAGE"
KUBECONFIG_IN_POD = "/var/run/thaw-test/kubeconfig"
KUBELET_MODES = ["process", pytest.param("podman", marks=pytest.mark.image)]


@dataclass(frozen=True)
class KubeletMode:
    """`image` is None in process mode."""

    name: str
    image: str | None

    @property
    def podman(self) -> bool:
        return self.image is not None

    def config(
        self, *, kubeconfig: Path | None = None, extra_env: Mapping[str, str] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:  # fmt: skip
        """KubeletConfig fields for this mode; `kubeconfig` is given to every pod as
        `KUBECONFIG` (in podman mode bind-mounted: the test's stand-in for a service account)."""
        env = dict(extra_env or {})
        mounts: dict[str, Path] = {}
        if kubeconfig is not None:
            if self.image is not None:
                mounts[KUBECONFIG_IN_POD] = kubeconfig
                env["KUBECONFIG"] = KUBECONFIG_IN_POD
            else:
                env["KUBECONFIG"] = str(kubeconfig)
        if self.image is not None:
            fields["podman"] = PodmanConfig(image=self.image, extra_mounts=mounts)
        return {**fields, "extra_env": env}


@pytest.fixture(scope="session")
def podman_image() -> str:
    """The built image (`THAW_TEST_IMAGE`); skips without podman or the variable."""
    image = os.environ.get(IMAGE_ENV)
    why = podman_missing(image)
    if why is not None:
        pytest.skip(f"podman mode: {why}")
    assert image is not None
    found = subprocess.run(["podman", "image", "exists", image], capture_output=True, timeout=60)
    if found.returncode != 0:
        pytest.fail(f"{IMAGE_ENV}={image} names no local image: build it (make image)")
    return image


@pytest.fixture
def kubelet_mode(request: pytest.FixtureRequest) -> KubeletMode:
    """ "process" (default) or "podman" (parametrize with KUBELET_MODES, indirect=True)."""
    name = getattr(request, "param", "process")
    if name == "podman":
        return KubeletMode(name, request.getfixturevalue("podman_image"))
    return KubeletMode(name, None)
