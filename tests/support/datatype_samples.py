"""One small array per Triton datatype, holding its edge values (the widest ints, FP16's max,
BYTES with non-ASCII and empty elements), for round trips over every wire format."""

from __future__ import annotations

import numpy as np

SAMPLES = {
    "BOOL": np.array([True, False, True]),
    "UINT8": np.array([0, 7, 255], dtype=np.uint8),
    "UINT16": np.array([0, 7, 65535], dtype=np.uint16),
    "UINT32": np.array([0, 7, 2**32 - 1], dtype=np.uint32),
    "UINT64": np.array([0, 7, 2**64 - 1], dtype=np.uint64),
    "INT8": np.array([-128, 0, 127], dtype=np.int8),
    "INT16": np.array([-32768, 0, 32767], dtype=np.int16),
    "INT32": np.array([-(2**31), 0, 2**31 - 1], dtype=np.int32),
    "INT64": np.array([-(2**63), 0, 2**63 - 1], dtype=np.int64),
    "FP16": np.array([-1.5, 0.0, 65504.0], dtype=np.float16),
    "FP32": np.array([-1.25, 0.0, 3.4e38], dtype=np.float32),
    "FP64": np.array([-1e300, 0.0, np.pi], dtype=np.float64),
    "BYTES": np.array([b"hello", "wörld".encode(), b""], dtype=np.object_),
}
