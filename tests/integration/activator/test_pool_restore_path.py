"""The warm pool's part of a fast cold start: an arena the image fits."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from activator.scaler.local.backend import arena_with_headroom
from snapshotter import build_image, open_store


def test_the_pool_arena_fits_an_image_of_many_small_tensors(tmp_path: Path) -> None:
    # Every tensor starts on a 4 KiB boundary in the image: 300 tiny tensors need 1.2 MiB
    # of arena for a file of a few KiB.
    version = tmp_path / "many" / "1"
    version.mkdir(parents=True)
    header: dict[str, Any] = {}
    blobs, pos = [], 0
    for i in range(300):
        raw = np.full(3, i, np.float32).tobytes()
        header[f"t{i}"] = {"dtype": "F32", "shape": [3], "data_offsets": [pos, pos + len(raw)]}
        blobs.append(raw)
        pos += len(raw)
    head = json.dumps(header).encode()
    (version / "model.safetensors").write_bytes(
        struct.pack("<Q", len(head)) + head + b"".join(blobs)
    )
    manifest = build_image(version, open_store(str(tmp_path / "store")))
    file_bytes = (version / "model.safetensors").stat().st_size
    assert manifest.arena_bytes > file_bytes
    assert manifest.arena_bytes <= arena_with_headroom(file_bytes)
