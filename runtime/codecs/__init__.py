"""Wire formats <-> the runtime's inference value types (runtime.inference); no I/O but bodies.

    rest            KServe v2 infer bodies: JSON and Triton's binary tensor data
    protobuf        `ModelInferRequest` / `ModelInferResponse` (gRPC's codec)
    generate        Triton's generate extension: flat JSON <-> an infer request
    body            request bodies under a byte cap: reads, gzip/deflate, bounded JSON
    tensor_json     a v2 tensor's JSON `data` -> a numpy array of its shape
    shm_tensors     one request's tensors in system shared memory

Exports `decode_infer_request` and `encode_infer_response` (REST).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.codecs.rest import decode_infer_request, encode_infer_response

__all__ = ["decode_infer_request", "encode_infer_response"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "decode_infer_request": "runtime.codecs.rest",
    "encode_infer_response": "runtime.codecs.rest",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
