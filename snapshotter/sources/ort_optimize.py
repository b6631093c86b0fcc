"""onnxruntime's optimized graph, made at build time so a restore skips graph optimization.

onnxruntime re-runs its graph optimizations (constant folding, fusions, the NCHWc layout) in
every new session; for a ResNet-50 that is most of session creation. The builder runs them
once (`ORT_ENABLE_ALL`), saves the optimized model with every initializer external, checks
that a session of the saved model with optimizations off (`ORT_DISABLE_ALL`) gives bitwise the
same outputs as the original model, and the image then carries that graph and its
initializers. The result is specific to the onnxruntime version and the CPU's instruction set
(the NCHWc block size follows the vector width), so it is keyed by `host_key()`: a runtime
with another key does not use it and loads the model files instead.
"""

from __future__ import annotations

import functools
import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from snapshotter.artifact_key import cpu_host

logger = logging.getLogger(__name__)

ARTIFACT = "onnx_graph_ort"
"""Artifact name of the host-optimized weightless graph (instead of `onnx_graph`)."""
VERSION_KEY = "onnxruntime_host"
"""`framework_versions` key holding the `host_key()` the graph was optimized for."""

_DATA_FILE = "optimized.data"


@functools.cache
def host_key() -> str:
    """onnxruntime version, machine and a digest of the CPU feature flags (at most 64 chars)."""
    import onnxruntime as ort

    return f"{ort.__version__}:{cpu_host()}"[:64]


def optimize_onnx(path: Path) -> Any | None:
    """The ORT-optimized model of `path` (an `onnx.ModelProto` with its initializers loaded),
    or None when it cannot be made or does not give bitwise the original outputs."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="thaw-ort-") as tmp:
        out = Path(tmp) / "optimized.onnx"
        try:
            options = _options(ort, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
            options.optimized_model_filepath = str(out)
            options.add_session_config_entry(
                "session.optimized_model_external_initializers_file_name", _DATA_FILE
            )
            options.add_session_config_entry(
                "session.optimized_model_external_initializers_min_size_in_bytes", "0"
            )
            original = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            disabled = _options(ort, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
            optimized = ort.InferenceSession(str(out), disabled, providers=["CPUExecutionProvider"])
            feed = sample_feed(original)
            if feed is None:
                logger.info("%s: inputs have no sample form; keeping the unoptimized graph", path)
                return None
            want, got = original.run(None, feed), optimized.run(None, feed)
            if not all(_same(a, b) for a, b in zip(want, got, strict=True)):
                logger.warning("%s: optimized graph changes outputs; keeping the original", path)
                return None
            return onnx.load(str(out), load_external_data=True)
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/... types
            logger.warning(
                "%s: onnxruntime cannot optimize it (%s); keeping the original", path, exc
            )
            return None


def _options(ort: Any, level: Any) -> Any:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.intra_op_num_threads = 1
    options.log_severity_level = 3  # the NCHWc "hardware specific" warning is expected here
    return options


_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


def sample_feed(session: Any) -> dict[str, np.ndarray] | None:
    """Deterministic inputs (symbolic dims 1; small values) for the output check."""
    rng = np.random.default_rng(0)
    feed: dict[str, np.ndarray] = {}
    for arg in session.get_inputs():
        dtype = _DTYPES.get(arg.type)
        if dtype is None:
            return None
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in arg.shape]
        values = rng.integers(0, 3, size=shape) if dtype != np.float32 else rng.random(shape)
        feed[arg.name] = np.asarray(values).astype(dtype)
    return feed


def _same(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
