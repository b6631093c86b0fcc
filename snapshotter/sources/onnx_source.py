"""ONNX models: initializers move into the image; the graph keeps external references to them.

The weightless graph (artifact `onnx_graph`) declares every moved initializer with its name,
dtype and dims, `data_location = EXTERNAL` and a placeholder location that names no real file.
onnxruntime never opens it as long as the session is given every moved initializer through
`SessionOptions.add_external_initializers(names, ortvalues)`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from snapshotter.errors import BuildError
from snapshotter.manifest import DTYPES
from snapshotter.sources import ExtractedModel, SourceTensor

PLACEHOLDER_LOCATION = "__thaw_image__"
_DATA_FIELDS = (
    "raw_data",
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
)


def extract_onnx(path: Path, *, ort_optimize: bool = False) -> ExtractedModel:
    """Read `model.onnx` (and its external data files) into image tensors + a weightless graph.

    With `ort_optimize`, the graph and tensors are onnxruntime's optimized model for this host
    (artifact `onnx_graph_ort`, see `ort_optimize`) when that gives the same outputs.
    """
    import onnx
    from onnx import numpy_helper

    try:
        model = onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError, OSError, ValidationError...
        raise BuildError(f"{path}: not a readable ONNX model: {exc}") from exc
    graph_name = "onnx_graph"
    versions = {"onnx": onnx.__version__, "opset": str(_opset(model))}
    if ort_optimize:
        from snapshotter.sources import ort_optimize as opt

        optimized = opt.optimize_onnx(path)
        if optimized is not None:
            model, graph_name = optimized, opt.ARTIFACT
            versions[opt.VERSION_KEY] = opt.host_key()
    tensors: list[SourceTensor] = []
    for init in model.graph.initializer:
        array, dtype = _to_array(init, numpy_helper)
        if array is None:
            continue  # a dtype the image cannot hold (strings, float8): stays in the graph
        tensors.append(SourceTensor(init.name, dtype, np.ascontiguousarray(array)))
        for name in _DATA_FIELDS:
            init.ClearField(name)
        del init.external_data[:]
        init.data_location = onnx.TensorProto.EXTERNAL
        entry = init.external_data.add()
        entry.key, entry.value = "location", PLACEHOLDER_LOCATION
    return ExtractedModel(
        framework="onnx",
        tensors=tensors,
        artifacts={graph_name: model.SerializeToString()},
        framework_versions=versions,
    )


def _to_array(init: object, numpy_helper: object) -> tuple[np.ndarray | None, str]:
    import onnx

    data_type = init.data_type  # type: ignore[attr-defined]
    if data_type == onnx.TensorProto.BFLOAT16:
        raw = np.frombuffer(init.raw_data, dtype=np.uint16)  # type: ignore[attr-defined]
        return raw.reshape(tuple(init.dims)), "bfloat16"  # type: ignore[attr-defined]
    try:
        array = numpy_helper.to_array(init)  # type: ignore[attr-defined]
    except Exception as exc:
        raise BuildError(f"initializer {init.name!r} is unreadable: {exc}") from exc  # type: ignore[attr-defined]
    name = array.dtype.name
    return (array, name) if name in DTYPES and name != "bfloat16" else (None, name)


def _opset(model: object) -> int:
    imports = model.opset_import  # type: ignore[attr-defined]
    return max((o.version for o in imports if o.domain in ("", "ai.onnx")), default=0)
