"""A `cuda:sm_NN` image of an ONNX model with the tensorrt accelerator carries onnxruntime's
TensorRT engine and timing caches; a restored session loads them (skipped without a GPU,
onnxruntime-gpu and TensorRT)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from runtime.backends.base import LoadContext
from runtime.backends.onnxruntime_backend import OnnxRuntimeBackend
from runtime.inference import InferRequest, InferTensor
from runtime.model_config import parse_config
from snapshotter import ImageLoader, build_image
from snapshotter.image_ref import ImageRef, resolve_target
from snapshotter.stores.dir_store import DirStore
from snapshotter.trt_cache import ARTIFACT, PROVIDER
from tests.fixtures.onnx_models import make_onnx_add

ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.integration,
    pytest.mark.skipif(
        not torch.cuda.is_available() or PROVIDER not in ort.get_available_providers(),
        reason="needs a CUDA device and onnxruntime-gpu with TensorRT",
    ),
]


def test_restored_session_runs_on_the_image_engines(tmp_path: Path) -> None:
    model_dir = make_onnx_add(tmp_path / "repo", size=64)
    config_path = model_dir / "config.pbtxt"
    config_path.write_text(
        config_path.read_text()
        + """
        instance_group [ { kind: KIND_GPU count: 1 } ]
        optimization { execution_accelerators { gpu_execution_accelerator : [ {
          name : "tensorrt"
          parameters { key: "trt_profile_min_shapes" value: "INPUT0:1x64" }
          parameters { key: "trt_profile_opt_shapes" value: "INPUT0:1x64" }
          parameters { key: "trt_profile_max_shapes" value: "INPUT0:8x64" }
        } ] } }
        """
    )
    target = resolve_target("cuda")
    manifest = build_image(model_dir / "1", DirStore(tmp_path / "cache"), target=target)
    assert ARTIFACT in manifest.artifacts
    assert manifest.artifact_keys[ARTIFACT]["target"] == target

    loader = ImageLoader(None, tmp_path / "cache", target)
    image = loader.restore(ImageRef("onnx_add", "1", target))
    image.unpack_root = tmp_path / "unpacked"
    config = parse_config(config_path.read_text(), str(model_dir))
    backend = OnnxRuntimeBackend()
    backend.load(
        LoadContext("onnx_add", "1", model_dir / "1", model_dir, config, "KIND_GPU", 0,
                    image=image, model_file=model_dir / "1" / "model.onnx")
    )  # fmt: skip
    options = backend._session.get_provider_options()[PROVIDER]
    assert options["trt_engine_cache_path"].startswith(str(tmp_path / "unpacked"))
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    (response,) = backend.execute(
        [InferRequest("m", "1", [InferTensor("INPUT0", "FP32", x.shape, x)])]
    )
    weight = image.tensors["W"]
    np.testing.assert_allclose(response.outputs[0].data, x + weight, rtol=1e-3, atol=1e-3)  # type: ignore[union-attr]
