"""onnxruntime's TensorRT execution provider: its engine and timing caches as an image artifact.

Triton users turn TensorRT on for an ONNX model with `optimization { execution_accelerators {
gpu_execution_accelerator: [ { name: "tensorrt" parameters { ... } } ] } }`; those parameters
are checked and mapped to the TensorRT EP's provider options by
`tritonconfig.tensorrt_accelerator`, for the runtime and this builder alike.

Building TensorRT engines is the slowest part of such a start (seconds to minutes per
subgraph). For a `cuda:sm_NN` image the builder creates the session the runtime will create
(the same weightless graph, the same external initializers, the same options) with
`trt_engine_cache_enable` / `trt_timing_cache_enable` pointed at a fresh directory, runs one
inference, checks the outputs against the CPU provider, and packs the directory (engines,
optimization profiles, timing cache, and onnxruntime's EP-context model `model_ctx.onnx`, which
names the engine files: `trt_dump_ep_context_model`, embed mode 0) as artifact `ort_trt_cache`,
keyed by `engine_key` (compute capability, TensorRT, onnxruntime, precision, model digest,
engine-shaping options). The runtime unpacks a matching one under its unpack root; with the
EP-context model it creates the session from that model (`context_model`: TensorRT
deserializes the engine, the builder never runs, no weights are read), else it points the same
cache options at the directory (TensorRT deserializes the cached engines). Anything else
(another GPU, another TensorRT) logs why and lets TensorRT build as usual.
"""

from __future__ import annotations

import ctypes
import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from snapshotter.artifact_archive import pack_dir
from snapshotter.artifact_key import short
from snapshotter.engine_key import engine_key
from snapshotter.ep_context import check_moved_copy, make_relocatable
from snapshotter.errors import ArtifactError, BuildError
from snapshotter.sources.ort_optimize import sample_feed
from tritonconfig.tensorrt_accelerator import tensorrt_provider_options

logger = logging.getLogger(__name__)

ARTIFACT = "ort_trt_cache"
PROVIDER = "TensorrtExecutionProvider"
CONTEXT_MODEL = "model_ctx.onnx"
# Where the caches live, and which device: not part of what an engine is.
_PLACEMENT = {
    "device_id",
    "trt_engine_cache_enable",
    "trt_engine_cache_path",
    "trt_timing_cache_enable",
    "trt_timing_cache_path",
    "trt_dump_subgraphs",
    "trt_detailed_build_log",
    "trt_dump_ep_context_model",
    "trt_ep_context_file_path",
    "trt_ep_context_embed_mode",
}


def session_options(
    params: Mapping[str, str], *, device_id: int, image: Any | None, target: str | None = None
) -> dict[str, str]:
    """The runtime's TensorRT EP options: `tensorrt_provider_options`, plus the image's engine and
    timing caches, unpacked, when the image has them for this GPU (`target`, default: the
    `cuda:sm_NN` of `device_id`), TensorRT and onnxruntime; otherwise a log line says why and
    TensorRT builds its engines as usual. Raises ModelConfigError for malformed parameters."""
    options = tensorrt_provider_options(params, device_id=device_id)
    if image is None:
        return options
    if target is None:
        from snapshotter.gpu_probe import cuda_target

        target = cuda_target(device_id)  # NVML: no torch CUDA context for an onnxruntime model
    key = cache_key(target, options, model_digest=image.manifest.source_digest)
    if image.keyed_artifact(ARTIFACT, key) is None:
        return options
    try:
        directory = image.unpack(ARTIFACT)
    except ArtifactError as exc:
        logger.warning("model=%s TensorRT cache in the image is unusable (%s); TensorRT builds "
                       "its engines", image.ref.model, exc)  # fmt: skip
        return options
    logger.info("model=%s TensorRT engines and timing cache from the image", image.ref.model)
    return with_caches(options, directory)


def with_caches(options: Mapping[str, str], directory: Path) -> dict[str, str]:
    """`options` with the engine and timing caches enabled in `directory`."""
    return {
        **options,
        "trt_engine_cache_enable": "True",
        "trt_engine_cache_path": str(directory),
        "trt_timing_cache_enable": "True",
        "trt_timing_cache_path": str(directory),
    }


def context_model(options: Mapping[str, str]) -> Path | None:
    """The EP-context model beside the image's engines that `options` point at, or None."""
    directory = options.get("trt_engine_cache_path")
    if not directory:
        return None
    path = Path(directory) / CONTEXT_MODEL
    return path if path.is_file() else None


def cache_key(target: str, options: Mapping[str, str], *, model_digest: str) -> dict[str, str]:
    """`engine_key` for this host: its onnxruntime and TensorRT versions, the options that
    shape an engine (precision, workspace, profiles, ...), and the model's source digest."""
    import onnxruntime as ort

    shaping = {k: v for k, v in options.items() if k not in _PLACEMENT}
    return engine_key(
        target=target,
        tensorrt=tensorrt_version(),
        onnxruntime=short(ort.__version__),
        model_digest=model_digest,
        options=shaping,
    )


def tensorrt_version() -> str | None:
    """The TensorRT library onnxruntime's TensorRT EP will load, or None when there is none."""
    try:
        import tensorrt

        return short(tensorrt.__version__)
    except ImportError:
        pass
    for name in ("libnvinfer.so.10", "libnvinfer.so.8", "libnvinfer.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        return f"libnvinfer-{int(lib.getInferLibVersion())}"
    return None


def build_engine_cache(
    graph: bytes, tensors: Mapping[str, np.ndarray], options: Mapping[str, str]
) -> bytes | None:
    """Build the engine and timing caches of a weightless graph + its initializers the way the
    runtime's session will, check one inference against the CPU provider, and return the cache
    directory packed (None when TensorRT built nothing or changed the outputs; logged).

    Raises BuildError when this onnxruntime has no TensorRT EP or the session fails."""
    import onnxruntime as ort

    if PROVIDER not in ort.get_available_providers():
        raise BuildError(
            "the model asks for the tensorrt accelerator but this onnxruntime has no "
            f"{PROVIDER}: build cuda images with onnxruntime-gpu and TensorRT installed"
        )
    device = {"device_id": options.get("device_id", "0")}
    with tempfile.TemporaryDirectory(prefix="thaw-trt-") as tmp:
        providers = [
            (PROVIDER, _dump_options(options, Path(tmp))),
            ("CUDAExecutionProvider", device),
        ]
        try:
            session, keep = _session(ort, graph, tensors, providers)
            if PROVIDER not in session.get_providers():
                raise BuildError(f"onnxruntime did not enable {PROVIDER} for this model")
            reference, keep_ref = _session(ort, graph, tensors, ["CPUExecutionProvider"])
            feed = sample_feed(reference)
            if feed is None:
                logger.warning("inputs have no sample form; no TensorRT engine cache built")
                return None
            got, want = list(session.run(None, feed)), list(reference.run(None, feed))
            del session, reference, keep, keep_ref
        except BuildError:
            raise
        except Exception as exc:  # onnxruntime raises its own Fail/EPFail/... types
            raise BuildError(f"TensorRT session cannot be built: {exc}") from exc
        if not _close(got, want, fp16=options.get("trt_fp16_enable") == "True"):
            logger.warning("TensorRT outputs differ from the CPU provider's; cache not stored")
            return None
        if not any(p.suffix == ".engine" for p in Path(tmp).rglob("*")):
            logger.warning("TensorRT built no engine (no subgraph assigned to it); nothing stored")
            return None
        _check_context_model(ort, Path(tmp), options, feed, want)
        return pack_dir(Path(tmp))


def _check_context_model(
    ort: Any, directory: Path, options: Mapping[str, str], feed: Any, want: list[Any]
) -> None:
    """The EP-context model beside the engines names them relatively and loads, runs and agrees
    with the CPU from a moved copy of the folder, as it will from an unpacked image."""
    context = directory / CONTEXT_MODEL
    if not context.is_file():
        return  # caches only: the runtime points the cache options at the unpacked folder
    make_relocatable(context)
    fp16 = options.get("trt_fp16_enable") == "True"
    device = {"device_id": options.get("device_id", "0")}

    def load_and_run(model: Path, moved: Path) -> list[Any]:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        providers = [(PROVIDER, with_caches(options, moved)), ("CUDAExecutionProvider", device)]
        session = ort.InferenceSession(str(model), so, providers=providers)
        if session.get_providers()[0] != PROVIDER:
            raise BuildError(f"the moved EP-context model did not start on {PROVIDER}")
        return list(session.run(None, feed))

    check_moved_copy(
        directory, CONTEXT_MODEL, load_and_run, lambda got: _close(got, want, fp16=fp16)
    )


def _dump_options(options: Mapping[str, str], directory: Path) -> dict[str, str]:
    """Cache options, plus the EP-context model dumped beside the engines (embed mode 0: the
    model names the engine files, so engines over protobuf's 2 GB limit still work). The engine
    cache path is relative ("."): while dumping, onnxruntime takes it relative to the context
    model's folder and writes `ep_cache_context` relative too; an absolute one would be copied
    into the attribute, and onnxruntime refuses to load an absolute `ep_cache_context`
    (snapshotter/ep_context.py)."""
    return {
        **with_caches(options, directory),
        "trt_engine_cache_path": ".",
        "trt_dump_ep_context_model": "True",
        "trt_ep_context_file_path": str(directory / CONTEXT_MODEL),
        "trt_ep_context_embed_mode": "0",
    }


def _session(
    ort: Any, graph: bytes, tensors: Mapping[str, np.ndarray], providers: list[Any]
) -> tuple[Any, list[Any]]:
    """A session as the runtime builds one from an image; the OrtValues must outlive it."""
    options = ort.SessionOptions()
    names = list(tensors)
    values = [ort.OrtValue.ortvalue_from_numpy(tensors[n]) for n in names]
    options.add_external_initializers(names, values)
    return ort.InferenceSession(graph, options, providers=providers), values


def _close(got: list[Any], want: list[Any], *, fp16: bool) -> bool:
    tolerance = 1e-2 if fp16 else 1e-3
    return all(
        np.asarray(a).shape == np.asarray(b).shape
        and np.allclose(np.asarray(a), np.asarray(b), rtol=tolerance, atol=tolerance)
        for a, b in zip(got, want, strict=True)
    )
