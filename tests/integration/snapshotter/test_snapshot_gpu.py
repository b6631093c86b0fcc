"""Restore into a CUDA device arena through the pinned staging ring (skipped without CUDA)."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapshotter import ImageLoader, build_image
from snapshotter.image_ref import ImageRef
from snapshotter.stores.dir_store import DirStore

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.integration,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_device_restore_matches_the_torchscript_weights(model_repo: Path, tmp_path: Path) -> None:
    build_image(
        model_repo / "mlp_torchscript" / "1", DirStore(tmp_path / "cache"), max_chunk_bytes=1 << 18
    )
    loader = ImageLoader(None, tmp_path / "cache", "cpu")
    img = loader.restore(ImageRef("mlp_torchscript", "1", "cpu"), device="cuda:0")
    original = torch.jit.load(str(model_repo / "mlp_torchscript" / "1" / "model.pt"))
    views = img.torch_tensors()
    assert img.device == "cuda:0" and img.tensors == {}
    for name, tensor in [*original.named_parameters(), *original.named_buffers()]:
        assert views[name].is_cuda
        assert torch.equal(views[name].cpu(), tensor), name
