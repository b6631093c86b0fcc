"""onnxruntime initializers over an image's own memory: host views, or DLPack device views."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from runtime.backends.ort_initializers import initializer_values
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


def test_device_views_become_initializers_without_a_copy(tmp_path: Path) -> None:
    if not hasattr(ort.OrtValue, "from_dlpack"):
        pytest.skip("this onnxruntime has no OrtValue.from_dlpack (device_plan restores on host)")
    model = make_onnx_add(tmp_path / "repo", size=64)
    build_image(model / "1", DirStore(tmp_path / "cache"))
    ref = ImageRef("onnx_add", "1", "cpu")
    host = ImageLoader(None, tmp_path / "cache", "cpu").restore(ref)
    device = FakeDevice()  # its "device memory" is a CPU torch tensor: DLPack works here too
    try:
        loader = ImageLoader(
            None, tmp_path / "cache", "cpu", device=DeviceConfig(headroom_bytes=0),
            copier_factory=lambda _: device,
        )  # fmt: skip
        on_device = loader.restore(ref, device="cuda:0")
        names, values = initializer_values(ort, on_device)
        views = on_device.torch_tensors()
        assert [v.data_ptr() for v in values] == [views[n].data_ptr() for n in names]  # no copy
        x = np.ones((1, 64), np.float32)
        got = _session(on_device, (names, values)).run(None, {"INPUT0": x})[0]
        want = _session(host, initializer_values(ort, host)).run(None, {"INPUT0": x})[0]
        np.testing.assert_array_equal(got, want)
    finally:
        device.close()
