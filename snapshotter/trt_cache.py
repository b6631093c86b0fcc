"""onnxruntime's TensorRT execution provider: its options from a Triton config, and its engine
and timing caches as an image artifact.

Triton users turn TensorRT on for an ONNX model with `optimization { execution_accelerators {
gpu_execution_accelerator: [ { name: "tensorrt" parameters { ... } } ] } }`; the parameter
names are the Triton onnxruntime backend's (`precision_mode`, `max_workspace_size_bytes`,
`trt_*`), mapped here to the TensorRT EP's provider options as that backend maps them.

Building TensorRT engines is the slowest part of such a start (seconds to minutes per
subgraph). For a `cuda:sm_NN` image the builder creates the session the runtime will create
(the same weightless graph, the same external initializers, the same options) with
`trt_engine_cache_enable` / `trt_timing_cache_enable` pointed at a fresh directory, runs one
inference, checks the outputs against the CPU provider, and packs the directory (engines,
optimization profiles, timing cache) as artifact `ort_trt_cache`, keyed by target, onnxruntime
and TensorRT versions and a digest of the options that change an engine. The runtime unpacks a
matching one under its unpack root and points the same options at it; TensorRT then
deserializes the engines instead of building them. Anything else (another GPU, another
TensorRT) logs why and lets TensorRT build as usual.
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
from snapshotter.artifact_key import settings_digest, short
from snapshotter.errors import ArtifactError, BuildError
from snapshotter.sources.ort_optimize import sample_feed

logger = logging.getLogger(__name__)

ARTIFACT = "ort_trt_cache"
PROVIDER = "TensorrtExecutionProvider"
ACCELERATOR = "tensorrt"

_BOOL, _INT, _STR = "bool", "int", "str"
# Triton onnxruntime backend key -> (TensorRT EP option, kind); `precision_mode` is separate.
_OPTIONS: dict[str, tuple[str, str]] = {
    "max_workspace_size_bytes": ("trt_max_workspace_size", _INT),
    "int8_calibration_table_name": ("trt_int8_calibration_table_name", _STR),
    "int8_use_native_calibration_table": ("trt_int8_use_native_calibration_table", _BOOL),
    **{
        key: (key, kind)
        for key, kind in {
            "trt_max_partition_iterations": _INT,
            "trt_min_subgraph_size": _INT,
            "trt_dla_enable": _BOOL,
            "trt_dla_core": _INT,
            "trt_engine_cache_enable": _BOOL,
            "trt_engine_cache_path": _STR,
            "trt_engine_cache_prefix": _STR,
            "trt_dump_subgraphs": _BOOL,
            "trt_force_sequential_engine_build": _BOOL,
            "trt_context_memory_sharing_enable": _BOOL,
            "trt_layer_norm_fp32_fallback": _BOOL,
            "trt_timing_cache_enable": _BOOL,
            "trt_timing_cache_path": _STR,
            "trt_force_timing_cache": _BOOL,
            "trt_detailed_build_log": _BOOL,
            "trt_build_heuristics_enable": _BOOL,
            "trt_sparsity_enable": _BOOL,
            "trt_builder_optimization_level": _INT,
            "trt_auxiliary_streams": _INT,
            "trt_tactic_sources": _STR,
            "trt_extra_plugin_lib_paths": _STR,
            "trt_profile_min_shapes": _STR,
            "trt_profile_max_shapes": _STR,
            "trt_profile_opt_shapes": _STR,
            "trt_cuda_graph_enable": _BOOL,
            "trt_dump_ep_context_model": _BOOL,
            "trt_ep_context_file_path": _STR,
            "trt_ep_context_embed_mode": _INT,
        }.items()
    },
}
_PRECISION = {"FP32": {}, "FP16": {"trt_fp16_enable": "True"}, "INT8": {"trt_int8_enable": "True"}}
# Where the caches live, and which device: not part of what an engine is.
_PLACEMENT = {
    "device_id",
    "trt_engine_cache_enable",
    "trt_engine_cache_path",
    "trt_timing_cache_enable",
    "trt_timing_cache_path",
    "trt_dump_subgraphs",
    "trt_detailed_build_log",
}


def tensorrt_params(config: Any) -> dict[str, str] | None:
    """The parameters of the config's `tensorrt` GPU accelerator, or None without one."""
    accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
    return next((dict(a.parameters) for a in accelerators if a.name == ACCELERATOR), None)


def provider_options(params: Mapping[str, str], *, device_id: int) -> dict[str, str]:
    """TensorRT EP provider options (all strings) for a tensorrt accelerator's parameters.
    Raises ValueError naming the parameter for an unknown key or a malformed value."""
    options = {"device_id": str(device_id)}
    for key, value in sorted(params.items()):
        if key == "precision_mode":
            if value.upper() not in _PRECISION:
                raise ValueError(
                    f"tensorrt parameter `precision_mode` = {value!r}, must be FP32, FP16 or INT8"
                )
            options.update(_PRECISION[value.upper()])
            continue
        if key not in _OPTIONS:
            raise ValueError(f"tensorrt parameter `{key}` is unknown (see Triton's onnxruntime "
                             "backend: TensorRT optimization parameters)")  # fmt: skip
        name, kind = _OPTIONS[key]
        options[name] = _value(key, value, kind)
    return options


def _value(key: str, value: str, kind: str) -> str:
    if kind == _BOOL:
        lowered = value.strip().lower()
        if lowered not in ("1", "0", "true", "false"):
            raise ValueError(f"tensorrt parameter `{key}` = {value!r}, must be 1, 0, true or false")
        return "True" if lowered in ("1", "true") else "False"
    if kind == _INT:
        try:
            return str(int(value))
        except ValueError:
            raise ValueError(
                f"tensorrt parameter `{key}` = {value!r}, must be an integer"
            ) from None
    return value


def session_options(
    params: Mapping[str, str], *, device_id: int, image: Any | None, target: str | None = None
) -> dict[str, str]:
    """The runtime's TensorRT EP options: `provider_options`, plus the image's engine and
    timing caches, unpacked, when the image has them for this GPU (`target`, default: the
    `cuda:sm_NN` of `device_id`), TensorRT and onnxruntime; otherwise a log line says why and
    TensorRT builds its engines as usual. Raises ValueError for malformed parameters."""
    options = provider_options(params, device_id=device_id)
    if image is None:
        return options
    if target is None:
        from snapshotter.compile_cache import device_target

        target = device_target(f"cuda:{device_id}")
    if image.keyed_artifact(ARTIFACT, cache_key(target, options)) is None:
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


def cache_key(target: str, options: Mapping[str, str]) -> dict[str, str]:
    """What an engine cache depends on: GPU target, onnxruntime and TensorRT versions, and the
    options that shape an engine (precision, workspace, profiles, ...)."""
    import onnxruntime as ort

    shaping = {k: v for k, v in options.items() if k not in _PLACEMENT}
    return {
        "target": target,
        "onnxruntime": short(ort.__version__),
        "tensorrt": tensorrt_version() or "none",
        "options": settings_digest(shaping),
    }


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
        providers = [(PROVIDER, with_caches(options, Path(tmp))), ("CUDAExecutionProvider", device)]
        try:
            session, keep = _session(ort, graph, tensors, providers)
            if PROVIDER not in session.get_providers():
                raise BuildError(f"onnxruntime did not enable {PROVIDER} for this model")
            reference, keep_ref = _session(ort, graph, tensors, ["CPUExecutionProvider"])
            feed = sample_feed(reference)
            if feed is None:
                logger.warning("inputs have no sample form; no TensorRT engine cache built")
                return None
            got, want = session.run(None, feed), reference.run(None, feed)
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
        return pack_dir(Path(tmp))


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
