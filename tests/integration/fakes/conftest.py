"""The test kubelet's mode fixtures (`kubelet_mode`, `podman_image`; tests/fakes/KUBERNETES.md)."""

from tests.fakes.kubelet_fixtures import kubelet_mode, podman_image

__all__ = ["kubelet_mode", "podman_image"]
