"""The TensorRT EP-context model in an image: engine paths relative, and loadable once moved."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper

from snapshotter.ep_context import check_moved_copy, context_paths, make_relocatable
from snapshotter.errors import BuildError
from snapshotter.trt_cache import CONTEXT_MODEL, _dump_options

ENGINE = "TensorrtExecutionProvider_TRTKernel_graph_main_0_0_0_sm90.engine"


def _context_model(directory: Path, cache_context: str, *, embed: int = 0) -> Path:
    """What onnxruntime's TensorRT EP dumps: one EPContext node naming its engine file."""
    x = helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [1, 4])
    node = helper.make_node(
        "EPContext", ["INPUT0"], ["OUTPUT0"], name="trt_node", domain="com.microsoft",
        embed_mode=embed, ep_cache_context=cache_context, hardware_architecture="sm90",
    )  # fmt: skip
    graph = helper.make_graph([node], "ctx", [x], [y])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    path = directory / CONTEXT_MODEL
    onnx.save(model, str(path))
    (directory / ENGINE).write_bytes(b"engine bytes")
    return path


def _resolve_like_onnxruntime(model: Path) -> bytes:
    """onnxruntime's rule for embed mode 0: relative to the model's folder, never absolute."""
    (value,) = context_paths(model)
    if Path(value).is_absolute() or ".." in Path(value).parts:
        raise RuntimeError(f"for security purpose, ep_cache_context must be relative: {value}")
    return (model.parent / value).read_bytes()


def test_the_engine_cache_is_dumped_relative_to_the_context_model(tmp_path: Path) -> None:
    options = _dump_options({"trt_fp16_enable": "True"}, tmp_path)
    assert options["trt_engine_cache_path"] == "."  # onnxruntime: relative to the ctx folder
    assert options["trt_ep_context_file_path"] == str(tmp_path / CONTEXT_MODEL)
    assert options["trt_timing_cache_path"] == str(tmp_path)


def test_an_absolute_engine_path_inside_the_folder_is_made_relative(tmp_path: Path) -> None:
    model = _context_model(tmp_path, str(tmp_path / ENGINE))
    assert make_relocatable(model) == 1
    assert context_paths(model) == [ENGINE]
    moved = tmp_path.parent / "elsewhere"
    shutil.copytree(tmp_path, moved)
    shutil.rmtree(tmp_path)  # the build folder is gone, as after `thaw snapshot build`
    assert _resolve_like_onnxruntime(moved / CONTEXT_MODEL) == b"engine bytes"


def test_a_relative_path_is_left_as_it_is(tmp_path: Path) -> None:
    model = _context_model(tmp_path, f"./{ENGINE}")
    before = model.read_bytes()
    assert make_relocatable(model) == 1 and model.read_bytes() == before


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("/etc/passwd", "outside"),
        (f"../{ENGINE}", "leaves its folder"),
        ("nope.engine", "not there"),
    ],
)
def test_an_engine_path_that_cannot_travel_fails_the_build(
    tmp_path: Path, value: str, message: str
) -> None:
    model = _context_model(tmp_path, value)
    with pytest.raises(BuildError, match=message):
        make_relocatable(model)


def test_an_embedded_engine_is_not_a_path(tmp_path: Path) -> None:
    model = _context_model(tmp_path, "raw engine bytes", embed=1)
    assert make_relocatable(model) == 0


def test_the_build_proves_the_context_model_loads_from_a_moved_copy(tmp_path: Path) -> None:
    build = tmp_path / "build"
    build.mkdir()
    model = _context_model(build, str(build / ENGINE))
    seen: list[Path] = []

    def load_and_run(path: Path, moved: Path) -> list[Any]:
        seen.append(moved)
        return [_resolve_like_onnxruntime(path)]

    with pytest.raises(BuildError, match="does not load from a moved copy"):
        check_moved_copy(build, CONTEXT_MODEL, load_and_run, lambda got: True)  # absolute still
    make_relocatable(model)
    check_moved_copy(build, CONTEXT_MODEL, load_and_run, lambda got: got == [b"engine bytes"])
    assert seen[-1] != build and not seen[-1].exists()  # it ran from a copy, since removed
    with pytest.raises(BuildError, match="other outputs"):
        check_moved_copy(build, CONTEXT_MODEL, load_and_run, lambda got: False)
