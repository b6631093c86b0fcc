"""onnxruntime initializers over a host image's own memory; a device-restored image is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from runtime.backends.ort_initializers import initializer_values
from runtime.errors import ServingError
from snapshotter import DeviceConfig, ImageLoader, build_image
from snapshotter.image_ref import ImageRef
from snapshotter.stores.dir_store import DirStore
from tests.fakes.fake_device import FakeDevice
from tests.fixtures.onnx_models import make_onnx_add


def _session(image: object, values: tuple[list[str], list[object]]) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.add_external_initializers(*values)
    graph = image.artifact("onnx_graph")  # type: ignore[attr-defined]
    return ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])


def test_host_views_become_initializers_without_a_copy(tmp_path: Path) -> None:
    model = make_onnx_add(tmp_path / "repo", size=64)
    build_image(model / "1", DirStore(tmp_path / "cache"))
    host = ImageLoader(None, tmp_path / "cache", "cpu").restore(ImageRef("onnx_add", "1", "cpu"))
    names, values = initializer_values(ort, host)
    assert [v.data_ptr() for v in values] == [host.tensors[n].ctypes.data for n in names]
    x = np.ones((1, 64), np.float32)
    got = _session(host, (names, values)).run(None, {"INPUT0": x})[0]
    np.testing.assert_allclose(got, x + host.tensors["W"])


def test_an_image_restored_into_a_gpu_is_refused_not_copied_twice(tmp_path: Path) -> None:
    # add_external_initializers with device OrtValues round-trips through the host and keeps
    # the weights twice in VRAM (onnxruntime#29009): onnxruntime takes host restores only.
    model = make_onnx_add(tmp_path / "repo", size=64)
    build_image(model / "1", DirStore(tmp_path / "cache"))
    device = FakeDevice()
    try:
        loader = ImageLoader(
            None, tmp_path / "cache", "cpu", device=DeviceConfig(headroom_bytes=0),
            copier_factory=lambda _: device,
        )  # fmt: skip
        on_device = loader.restore(ImageRef("onnx_add", "1", "cpu"), device="cuda:0")
        with pytest.raises(ServingError, match="onnxruntime takes its weights from a host"):
            initializer_values(ort, on_device)
    finally:
        device.close()
