"""Triton's `ModelConfig` protobuf module, without importing `tritonclient.grpc` (and grpc).

`tritonclient` ships the generated `tritonclient/grpc/model_config_pb2.py`, but importing it the
usual way runs `tritonclient/grpc/__init__.py`, which imports grpc and the gRPC client: ~0.2 s
of every `thaw serve` and `thaw up` start spent on code neither calls. The generated file
itself needs only `google.protobuf`, so it is loaded straight from its file, under its real
dotted name (`tritonclient.grpc.model_config_pb2`) and registered in `sys.modules`: a later
`from tritonclient.grpc import model_config_pb2` (tests, examples) gets this same module, so
the protobuf descriptor pool holds `model_config.proto` once and messages are one type.
Anything unexpected falls back to the normal import.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

__all__ = ["mc"]

_NAME = "tritonclient.grpc.model_config_pb2"


def _load() -> ModuleType:
    loaded = sys.modules.get(_NAME)
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("tritonclient")  # finds, does not run, its __init__
    locations = package.submodule_search_locations if package is not None else None
    if locations:
        path = Path(next(iter(locations))) / "grpc" / "model_config_pb2.py"
        spec = importlib.util.spec_from_file_location(_NAME, path)
        if path.is_file() and spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            sys.modules[_NAME] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(_NAME, None)
                raise
            parent = sys.modules.get("tritonclient.grpc")
            if parent is not None:  # imported meanwhile: make the attribute match
                vars(parent)["model_config_pb2"] = module
            return module
    return importlib.import_module(_NAME)


if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc
else:
    mc = _load()
