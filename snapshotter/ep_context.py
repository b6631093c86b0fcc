"""onnxruntime's EP-context model (`model_ctx.onnx`) made relocatable, and proven to load moved.

An image carries the TensorRT EP's engines with the EP-context model that names them (embed
mode 0: node attribute `ep_cache_context` = the engine file). onnxruntime resolves that path
against the context model's own directory and, "for security purpose", refuses one that is
absolute or has `..` in it. The engines are built in a temporary directory and unpacked at load
somewhere else, so the attribute must be relative:

    dump with trt_engine_cache_path "." (relative: onnxruntime makes it relative to the
        │     directory of `trt_ep_context_file_path`, and writes the attribute relative too)
    normalize (`make_relocatable`): every EPContext node's path checked — absolute inside the
        │     directory → rewritten relative; absolute elsewhere, `..`, or no such file → BuildError
    prove (`check_moved_copy`): the directory copied elsewhere, the context model loaded and run
              from the copy, outputs compared; any failure → BuildError (an image whose engines
              cannot load would cost every cold start a TensorRT build)
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from snapshotter.errors import BuildError

__all__ = ["EP_CONTEXT_OP", "check_moved_copy", "context_paths", "make_relocatable"]

EP_CONTEXT_OP = "EPContext"
_DOMAIN = "com.microsoft"


def _context_nodes(model: Any) -> list[Any]:
    return [n for n in model.graph.node if n.op_type == EP_CONTEXT_OP and n.domain == _DOMAIN]


def _attribute(node: Any, name: str) -> Any:
    for attribute in node.attribute:
        if attribute.name == name:
            return attribute
    return None


def context_paths(path: Path) -> list[str]:
    """`ep_cache_context` of every EPContext node in embed mode 0 of the model at `path`."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    out = []
    for node in _context_nodes(model):
        embed = _attribute(node, "embed_mode")
        if embed is not None and embed.i != 0:
            continue  # the engine is inside the attribute
        cache = _attribute(node, "ep_cache_context")
        if cache is not None:
            out.append(cache.s.decode())
    return out


def make_relocatable(path: Path) -> int:
    """Make every engine path of the context model at `path` relative to its directory (rewritten
    in place when needed); the number of engines it names. BuildError for a path that leaves the
    directory or names no file."""
    import onnx

    directory = path.parent.resolve()
    model = onnx.load(str(path), load_external_data=False)
    changed, count = False, 0
    for node in _context_nodes(model):
        embed = _attribute(node, "embed_mode")
        cache = _attribute(node, "ep_cache_context")
        if cache is None or (embed is not None and embed.i != 0):
            continue
        relative = _relative(cache.s.decode(), directory, node.name)
        if relative != cache.s.decode():
            cache.s = relative.encode()
            changed = True
        count += 1
    if changed:
        onnx.save(model, str(path))
    return count


def _relative(value: str, directory: Path, node: str) -> str:
    given = Path(value)
    if given.is_absolute():
        try:
            value = given.resolve().relative_to(directory).as_posix()
        except ValueError:
            raise BuildError(
                f"EPContext node '{node}' names engine {value!r}, outside {directory}"
            ) from None
    if ".." in PurePosixPath(value).parts:
        raise BuildError(f"EPContext node '{node}' names engine {value!r}, which leaves its folder")
    if not (directory / value).is_file():
        raise BuildError(f"EPContext node '{node}' names engine {value!r}, which is not there")
    return value


LoadAndRun = Callable[[Path, Path], list[Any]]
"""(context model path, its directory) -> outputs of one inference, or raise."""


def check_moved_copy(
    directory: Path, model_name: str, load_and_run: LoadAndRun, close: Callable[[list[Any]], bool]
) -> None:
    """Copy `directory` somewhere else, load `model_name` from the copy and run it
    (`load_and_run`); BuildError unless that works and `close(outputs)` holds."""
    with tempfile.TemporaryDirectory(prefix="thaw-ctx-moved-") as tmp:
        moved = Path(tmp) / "moved"
        shutil.copytree(directory, moved)
        try:
            outputs = load_and_run(moved / model_name, moved)
        except BuildError:
            raise
        except Exception as exc:  # onnxruntime raises its own Fail/EPFail/... types
            raise BuildError(
                f"the EP-context model does not load from a moved copy of its folder: {exc}"
            ) from exc
        if not close(outputs):
            raise BuildError("the EP-context model, moved, gives other outputs than the CPU")
