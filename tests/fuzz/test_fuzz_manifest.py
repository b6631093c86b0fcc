"""Fuzz the snapshot manifest parser (`Manifest.from_json`): untrusted bytes from a store.

Property: any bytes either parse into a Manifest that survives its own round trip (and whose
every tensor lies inside its chunk) or are refused with `ManifestError` (a `SnapshotError`:
the image is skipped, the model loads its files); never another exception, never a hang.
Inputs are a valid manifest with one field replaced, dropped, or its bytes damaged.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from hypothesis import strategies as st

from snapshotter.errors import ManifestError, SnapshotError
from snapshotter.manifest import Manifest
from tests.fuzz.targets import fuzz_target, json_values


def _digest(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def _tensor(name: str, dtype: str, shape: list[int], *, chunk: int, nbytes: int) -> dict[str, Any]:
    return {"name": name, "dtype": dtype, "shape": shape, "chunk": chunk, "offset": 0,
            "nbytes": nbytes}  # fmt: skip


def _valid() -> dict[str, Any]:
    return {
        "format": "thaw-image",
        "format_version": 2,
        "model": "mlp",
        "version": "1",
        "target": "cpu",
        "source_digest": _digest(0),
        "framework": "onnxruntime",
        "framework_versions": {"onnxruntime": "1.20"},
        "chunks": [{"digest": _digest(1), "size": 8192}, {"digest": _digest(2), "size": 16}],
        "tensors": [
            _tensor("w", "float32", [2, 512], chunk=0, nbytes=4096),
            _tensor("b", "bfloat16", [8], chunk=1, nbytes=16),
        ],
        "artifacts": {"engine": {"digest": _digest(3), "size": 10}},
        "artifact_keys": {"engine": {"target": "cpu", "torch": "2.5"}},
    }


_PATHS = st.sampled_from(
    [("format",), ("format_version",), ("model",), ("version",), ("target",),
     ("source_digest",), ("framework",), ("framework_versions",), ("chunks",), ("chunks", 0),
     ("chunks", 0, "digest"), ("chunks", 0, "size"), ("chunks", 1, "size"), ("tensors",),
     ("tensors", 0), ("tensors", 0, "name"), ("tensors", 0, "dtype"), ("tensors", 0, "shape"),
     ("tensors", 0, "chunk"), ("tensors", 0, "offset"), ("tensors", 0, "nbytes"),
     ("tensors", 1, "shape"), ("artifacts",), ("artifacts", "engine"),
     ("artifacts", "engine", "size"), ("artifact_keys",), ("artifact_keys", "engine")]
)  # fmt: skip
_SPECIAL = st.sampled_from(
    [None, True, -1, 0, 1, 4095, 1 << 40, (1 << 40) + 1, 1 << 64, 1.5, "", "..", "../../etc",
     "a/b", "x\x00", "A" * 2000, _digest(1), [], {}, [1 << 20] * 3, {"digest": _digest(1)}]
)  # fmt: skip


_MISSING = object()


def _step(parent: Any, key: str | int) -> Any:
    """`parent[key]`, or _MISSING when `parent` has no such key or index."""
    if isinstance(parent, dict) and isinstance(key, str):
        return parent.get(key, _MISSING)
    if isinstance(parent, list) and isinstance(key, int) and key < len(parent):
        return parent[key]
    return _MISSING


@st.composite
def _documents(draw: st.DrawFn) -> bytes:
    doc = _valid()
    for _ in range(draw(st.integers(1, 3))):
        *walk, last = draw(_PATHS)
        parent: Any = doc
        for key in walk:  # an earlier change may have replaced or dropped a step of the path
            parent = _step(parent, key)
        if isinstance(parent, dict) and draw(st.integers(0, 4)) == 0:
            parent.pop(last, None)
        elif _step(parent, last) is not _MISSING:
            parent[last] = draw(_SPECIAL | json_values)
    data = json.dumps(doc).encode()
    if draw(st.integers(0, 5)) == 0:
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + draw(st.binary(max_size=3)) + data[at + 1 :]
    return data


@fuzz_target(_documents() | st.binary(max_size=100))
def _parse(data: bytes) -> None:
    try:
        manifest = Manifest.from_json(data)
    except ManifestError:
        return
    assert Manifest.from_json(manifest.to_json()) == manifest
    for tensor in manifest.tensors:
        assert tensor.offset + tensor.nbytes <= manifest.chunks[tensor.chunk].size
    assert manifest.arena_bytes >= sum(c.size for c in manifest.chunks)
    assert isinstance(manifest.ref.key, str)


test_manifest, test_manifest_long = _parse


def test_a_manifest_error_is_a_snapshot_error() -> None:
    """What the loader catches to skip a bad image (`ImageLoader.find`) covers the parser's."""
    assert issubclass(ManifestError, SnapshotError)
