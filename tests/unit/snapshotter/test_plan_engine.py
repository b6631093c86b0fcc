"""`tensorrt_plan` images: the plan as an artifact keyed by GPU, TensorRT and model digest."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest

from snapshotter import Arena, BuildError, NothingToImage, RestoredImage, build_image
from snapshotter.manifest import ChunkEntry, Manifest
from snapshotter.plan_engine import ARTIFACT, plan_from_image, plan_key, tensorrt_module_version
from snapshotter.stores.dir_store import DirStore

MODEL = "ee" * 32


def _plan_dir(tmp_path: Path) -> Path:
    version = tmp_path / "repo" / "plan" / "1"
    version.mkdir(parents=True)
    (version / "model.plan").write_bytes(b"not really an engine")
    return version


def test_a_cpu_image_of_a_plan_has_nothing_in_it(tmp_path: Path) -> None:
    with pytest.raises(NothingToImage, match="a TensorRT plan runs on a GPU"):
        build_image(_plan_dir(tmp_path), DirStore(tmp_path / "store"), target="cpu")


def test_a_cuda_image_of_a_plan_needs_that_gpu_here(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(BuildError, match="needs a CUDA device, and this machine has none"):
        build_image(_plan_dir(tmp_path), DirStore(tmp_path / "store"), target="cuda:sm_90")


def _image(key: dict[str, str]) -> RestoredImage:
    plan = b"engine bytes"
    manifest = Manifest(
        model="plan", version="1", target="cuda:sm_90", source_digest=MODEL,
        framework="tensorrt_plan", framework_versions={}, chunks=(), tensors=(),
        artifacts={ARTIFACT: ChunkEntry(hashlib.sha256(plan).hexdigest(), len(plan))},
        artifact_keys={ARTIFACT: key},
    )  # fmt: skip
    return RestoredImage(manifest.ref, manifest, Arena(0), {}, {ARTIFACT: plan}, {})


def test_the_runtime_takes_the_plan_only_for_its_gpu_and_tensorrt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    here = plan_key("cuda:sm_90", tensorrt=tensorrt_module_version(), model_digest=MODEL)
    assert here["precision"] == "plan" and here["onnxruntime"] == "none"
    assert plan_from_image(_image(here), device_id=0, target="cuda:sm_90") == b"engine bytes"
    with caplog.at_level(logging.INFO):
        assert plan_from_image(_image(here), device_id=0, target="cuda:sm_80") is None
        other = {**here, "tensorrt": "8.6.1"}
        assert plan_from_image(_image(other), device_id=0, target="cuda:sm_90") is None
    assert "target: built with cuda:sm_90, here cuda:sm_80" in caplog.text
    assert "tensorrt: built with 8.6.1" in caplog.text
