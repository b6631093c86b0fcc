"""TensorRT EP options from a Triton config, the engine-cache key, and how a restore points the
session at an image's caches (or, when they do not fit, says why and leaves TensorRT alone).
Everything here runs without a GPU; the end-to-end build lives in tests/integration (gpu)."""

from __future__ import annotations

import hashlib
import io
import logging
import tarfile
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from snapshotter import Arena, BuildError, RestoredImage, build_image, trt_session_options
from snapshotter.artifact_archive import pack_dir
from snapshotter.engine_key import engine_key, precision_of
from snapshotter.manifest import ChunkEntry, Manifest
from snapshotter.stores.dir_store import DirStore
from snapshotter.trt_cache import (
    ARTIFACT,
    CONTEXT_MODEL,
    build_engine_cache,
    cache_key,
    context_model,
    with_caches,
)
from tests.fixtures.onnx_models import make_onnx_add
from tritonconfig import ModelConfigError, tensorrt_parameters, tensorrt_provider_options

TRT_ACCELERATOR = """
optimization { execution_accelerators {
  gpu_execution_accelerator : [ {
    name : "tensorrt"
    parameters { key: "precision_mode" value: "FP16" }
    parameters { key: "max_workspace_size_bytes" value: "1073741824" }
    parameters { key: "trt_engine_cache_enable" value: "1" }
  } ]
}}
"""
TRT_CONFIG = 'name: "onnx_add"\nplatform: "onnxruntime_onnx"\n' + TRT_ACCELERATOR


def _config(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_triton_parameters_map_to_tensorrt_ep_options() -> None:
    params = tensorrt_parameters(_config(TRT_CONFIG))
    assert params is not None
    options = tensorrt_provider_options(params, device_id=1)
    assert options == {
        "device_id": "1",
        "trt_fp16_enable": "True",
        "trt_max_workspace_size": "1073741824",
        "trt_engine_cache_enable": "True",
    }
    assert tensorrt_parameters(_config('name: "m"')) is None
    more = tensorrt_provider_options(
        {"precision_mode": "int8", "trt_cuda_graph_enable": "false", "trt_min_subgraph_size": "3"},
        device_id=0,
    )
    assert more["trt_int8_enable"] == "True" and more["trt_cuda_graph_enable"] == "False"
    assert more["trt_min_subgraph_size"] == "3"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"precision_mode": "FP8"}, "`precision_mode` = 'FP8'"),
        ({"trt_fancy": "1"}, "`trt_fancy` is unknown"),
        ({"max_workspace_size_bytes": "lots"}, "must be an integer"),
        ({"trt_engine_cache_enable": "yes"}, "must be 1, 0, true or false"),
    ],
)
def test_malformed_parameters_are_named(params: dict[str, str], message: str) -> None:
    with pytest.raises(ModelConfigError, match=message):
        tensorrt_provider_options(params, device_id=0)


MODEL = "ab" * 32


def _key(target: str, options: dict[str, str], model: str = MODEL) -> dict[str, str]:
    return cache_key(target, options, model_digest=model)


def test_cache_key_follows_what_shapes_an_engine_not_where_it_lives(tmp_path: Path) -> None:
    fp16 = tensorrt_provider_options({"precision_mode": "FP16"}, device_id=0)
    key = _key("cuda:sm_90", fp16)
    assert key["target"] == "cuda:sm_90" and key["onnxruntime"] and key["tensorrt"]
    assert key["precision"] == "fp16" and key["model"] == MODEL
    moved = {**with_caches(fp16, tmp_path), "device_id": "3", "trt_dump_ep_context_model": "1"}
    assert _key("cuda:sm_90", moved) == key
    assert _key("cuda:sm_90", tensorrt_provider_options({}, device_id=0)) != key
    assert _key("cuda:sm_80", fp16)["target"] == "cuda:sm_80"
    assert _key("cuda:sm_90", fp16, model="cd" * 32) != key  # another model's engine


def test_engine_key_names_every_field_an_engine_depends_on() -> None:
    key = engine_key(
        target="cuda:sm_90", tensorrt="10.9.0", onnxruntime=None, model_digest="ff" * 32,
        options={"trt_int8_enable": "True", "trt_fp16_enable": "True"},
    )  # fmt: skip
    assert set(key) == {"target", "tensorrt", "onnxruntime", "precision", "model", "options"}
    assert key["onnxruntime"] == "none" and key["precision"] == "int8"
    assert precision_of({}) == "fp32" and precision_of({"trt_bf16_enable": "1"}) == "bf16"
    assert precision_of({"trt_fp16_enable": "False"}) == "fp32"


def test_context_model_is_found_only_beside_the_image_engines(tmp_path: Path) -> None:
    assert context_model({"trt_fp16_enable": "True"}) is None
    assert context_model(with_caches({}, tmp_path)) is None
    (tmp_path / CONTEXT_MODEL).write_bytes(b"onnx")
    assert context_model(with_caches({}, tmp_path)) == tmp_path / CONTEXT_MODEL


def _image(tmp_path: Path, archive: bytes, key: dict[str, str]) -> RestoredImage:
    digest = hashlib.sha256(archive).hexdigest()
    manifest = Manifest(
        model="onnx_add",
        version="1",
        target="cuda:sm_90",
        source_digest=MODEL,
        framework="onnx",
        framework_versions={},
        chunks=(),
        tensors=(),
        artifacts={ARTIFACT: ChunkEntry(digest, len(archive))},
        artifact_keys={ARTIFACT: key},
    )
    return RestoredImage(
        manifest.ref, manifest, Arena(0), {}, {ARTIFACT: archive}, {},
        unpack_root=tmp_path / "cache" / "unpacked",
    )  # fmt: skip


def _engines(tmp_path: Path) -> bytes:
    src = tmp_path / "built"
    src.mkdir(exist_ok=True)
    (src / "TensorrtExecutionProvider_TRTKernel_graph_main_1_0_0_fp16_sm90.engine").write_bytes(
        b"engine"
    )
    (src / "TensorrtExecutionProvider_cache_sm90.timing").write_bytes(b"timing")
    return pack_dir(src)


def test_matching_image_points_the_session_at_its_unpacked_caches(tmp_path: Path) -> None:
    params = {"precision_mode": "FP16"}
    key = _key("cuda:sm_90", tensorrt_provider_options(params, device_id=0))
    img = _image(tmp_path, _engines(tmp_path), key)
    options = trt_session_options(params, device_id=0, image=img, target="cuda:sm_90")
    cache = Path(options["trt_engine_cache_path"])
    assert options["trt_engine_cache_enable"] == "True" == options["trt_timing_cache_enable"]
    assert options["trt_timing_cache_path"] == str(cache)
    assert cache.parent == tmp_path / "cache" / "unpacked"
    assert sorted(p.suffix for p in cache.iterdir()) == [".engine", ".timing"]


def test_image_for_another_gpu_or_tensorrt_is_not_used_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    params = {"precision_mode": "FP16"}
    key = _key("cuda:sm_90", tensorrt_provider_options(params, device_id=0))
    img = _image(tmp_path, _engines(tmp_path), {**key, "tensorrt": "10.0.0"})
    with caplog.at_level(logging.INFO):
        other_trt = trt_session_options(params, device_id=0, image=img, target="cuda:sm_90")
        img2 = _image(tmp_path, _engines(tmp_path), key)
        other_gpu = trt_session_options(params, device_id=0, image=img2, target="cuda:sm_80")
    assert "trt_engine_cache_path" not in other_trt and "trt_engine_cache_path" not in other_gpu
    assert "tensorrt: built with 10.0.0" in caplog.text
    assert "target: built with cuda:sm_90, here cuda:sm_80" in caplog.text
    assert not (tmp_path / "cache" / "unpacked").exists()  # nothing unpacked for nothing


def test_hostile_engine_archive_falls_back_to_building(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("../../outside.engine")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    params: dict[str, str] = {}
    key = _key("cuda:sm_90", tensorrt_provider_options(params, device_id=0))
    img = _image(tmp_path, buffer.getvalue(), key)
    with caplog.at_level(logging.WARNING):
        options = trt_session_options(params, device_id=0, image=img, target="cuda:sm_90")
    assert options == {"device_id": "0"}
    assert "TensorRT cache in the image is unusable" in caplog.text
    assert not list(tmp_path.rglob("outside.engine"))


def test_building_engines_without_the_tensorrt_ep_is_a_clear_error() -> None:
    import onnxruntime as ort

    if "TensorrtExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has the TensorRT EP")
    with pytest.raises(BuildError, match="has no TensorrtExecutionProvider"):
        build_engine_cache(b"", {}, {"device_id": "0"})


def _onnx_with_tensorrt(repo: Path) -> Path:
    model_dir = make_onnx_add(repo)
    config = model_dir / "config.pbtxt"
    config.write_text(config.read_text() + TRT_ACCELERATOR)
    return model_dir


def test_cuda_image_of_a_tensorrt_model_needs_that_gpu_here(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    model_dir = _onnx_with_tensorrt(tmp_path / "repo")
    with pytest.raises(BuildError, match="needs a CUDA device, and this machine has none"):
        build_image(model_dir / "1", DirStore(tmp_path / "store"), target="cuda:sm_90")
    assert not (tmp_path / "store" / "images").exists()
    # The same model builds a cpu image (TensorRT has nothing to build there).
    manifest = build_image(model_dir / "1", DirStore(tmp_path / "store"), target="cpu")
    assert ARTIFACT not in manifest.artifacts and manifest.format_version == 1
