"""The versioned image manifest: tensor index, content-addressed chunks, artifacts; strict parsing.

Format versions: 1 is weights + artifacts; 2 adds `artifact_keys`, what each compiled artifact
(torch compile cache, TensorRT engine cache) was built for: target and framework versions; 3
adds a checkpoint's file list (`shards`: the safetensors files the weights came from, each with
its sha256; `files`: the tokenizer and config files stored beside the weights, restored to
disk; see `model_files`). A manifest is written with the lowest version that holds what it
carries, so images without compiled caches or model files stay readable by older runtimes, and
every older image still loads.

A manifest read from a store is untrusted. `Manifest.from_json` refuses anything malformed,
any size or offset out of range, any tensor outside its chunk, and any value that could become a
path: chunks and artifacts are named only by sha256 digests (see `content_address`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from snapshotter.content_address import check_digest
from snapshotter.errors import ImageRefError, ManifestError
from snapshotter.image_ref import ImageRef
from snapshotter.model_files import MAX_FILES, check_file_name, set_digest

FORMAT = "thaw-image"
FORMAT_VERSION = 3
"""The newest manifest version this code writes and reads; it reads every version in
`READABLE_VERSIONS`."""
READABLE_VERSIONS = (1, 2, 3)
MAX_KEY_FIELDS = 32
ALIGNMENT = 4096
MAX_MANIFEST_BYTES = 64 << 20
MAX_CHUNK_BYTES = 1 << 40
MAX_TENSORS = 1_000_000
MAX_NAME_CHARS = 1024

# Manifest dtype name -> (numpy dtype used for the view, itemsize). bfloat16 has no numpy
# dtype: its numpy view is uint16 and `RestoredImage.torch_tensors()` reinterprets it.
DTYPES: dict[str, tuple[str, int]] = {
    "float64": ("float64", 8),
    "float32": ("float32", 4),
    "float16": ("float16", 2),
    "bfloat16": ("uint16", 2),
    "int64": ("int64", 8),
    "int32": ("int32", 4),
    "int16": ("int16", 2),
    "int8": ("int8", 1),
    "uint8": ("uint8", 1),
    "uint16": ("uint16", 2),
    "uint32": ("uint32", 4),
    "uint64": ("uint64", 8),
    "bool": ("bool", 1),
}


def align_up(n: int, alignment: int = ALIGNMENT) -> int:
    """Round `n` up to a multiple of `alignment`."""
    return (n + alignment - 1) // alignment * alignment


@dataclass(frozen=True)
class ChunkEntry:
    """A content-addressed blob of tensor bytes; `size` in bytes."""

    digest: str
    size: int


@dataclass(frozen=True)
class TensorEntry:
    """Where one weight lives: chunk index, byte offset (4 KiB aligned) and length in bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    chunk: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class ShardEntry:
    """One safetensors file of the checkpoint the image was built from: its file name, size in
    bytes and sha256. Its tensors live in the chunks; the entry records where they came from."""

    name: str
    digest: str
    size: int


@dataclass(frozen=True)
class Manifest:
    """Everything needed to restore one image, and nothing that names a filesystem path."""

    model: str
    version: str
    target: str
    source_digest: str
    framework: str
    framework_versions: dict[str, str]
    chunks: tuple[ChunkEntry, ...]
    tensors: tuple[TensorEntry, ...]
    artifacts: dict[str, ChunkEntry] = field(default_factory=dict)
    artifact_keys: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per compiled artifact: the fields it was built for (`target`, `torch`, `tensorrt`, ...),
    compared with the restoring host's before the artifact is used (`artifact_key`)."""
    shards: tuple[ShardEntry, ...] = ()
    files: dict[str, ChunkEntry] = field(default_factory=dict)
    """The checkpoint's other files (tokenizer, configs, the shard index) by file name: blobs in
    the store, written back to disk by a restore (`model_files`)."""

    @property
    def format_version(self) -> int:
        """3 with a checkpoint's file list, 2 with keyed artifacts, else 1 (the lowest version
        that holds it, so older runtimes still read what they can)."""
        if self.shards or self.files:
            return 3
        return 2 if self.artifact_keys else 1

    @property
    def ref(self) -> ImageRef:
        return ImageRef(self.model, self.version, self.target)

    @property
    def chunk_bases(self) -> tuple[int, ...]:
        """Byte offset of each chunk in the restore arena (each 4 KiB aligned)."""
        bases, pos = [], 0
        for chunk in self.chunks:
            bases.append(pos)
            pos += align_up(chunk.size)
        return tuple(bases)

    @property
    def arena_bytes(self) -> int:
        """Arena size this image needs, in bytes."""
        return sum(align_up(c.size) for c in self.chunks)

    @property
    def weight_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    def all_digests(self) -> set[str]:
        """Every chunk, artifact and model-file digest this manifest references (the store's
        blobs; shard digests name source files, not blobs)."""
        return (
            {c.digest for c in self.chunks}
            | {a.digest for a in self.artifacts.values()}
            | {f.digest for f in self.files.values()}
        )

    @property
    def files_dir_name(self) -> str | None:
        """The directory a restore writes `files` into (under the cache's unpack root), named
        for the set; None when there are none."""
        return set_digest(self.files) if self.files else None

    def blobs(self) -> list[ChunkEntry]:
        """Every blob of the image, each digest once: chunks, artifacts, model files."""
        seen: dict[str, ChunkEntry] = {}
        for entry in (*self.chunks, *self.artifacts.values(), *self.files.values()):
            seen.setdefault(entry.digest, entry)
        return list(seen.values())

    def to_json(self) -> bytes:
        doc = asdict(self)
        doc["format"] = FORMAT
        doc["format_version"] = self.format_version
        if not self.artifact_keys:
            del doc["artifact_keys"]  # a version-1 manifest, byte for byte
        if self.format_version < 3:
            del doc["shards"], doc["files"]
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        """Parse and validate an untrusted manifest; raise `ManifestError` on anything wrong."""
        if len(data) > MAX_MANIFEST_BYTES:
            raise ManifestError(f"manifest is {len(data)} bytes, over {MAX_MANIFEST_BYTES}")
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise ManifestError(f"manifest is not valid JSON: {exc}") from exc
        return _parse(doc)


def _parse(doc: Any) -> Manifest:
    _require(isinstance(doc, dict), "manifest must be a JSON object")
    _require(doc.get("format") == FORMAT, f"`format` must be {FORMAT!r}")
    version = doc.get("format_version")
    _require(
        version in READABLE_VERSIONS and not isinstance(version, bool),
        "unsupported `format_version`",
    )
    try:
        ref = ImageRef(doc.get("model"), doc.get("version"), doc.get("target"))
    except ImageRefError as exc:
        raise ManifestError(str(exc)) from exc
    chunks = tuple(_chunk(c) for c in _list(doc, "chunks", 1 << 20))
    _require(len({c.digest for c in chunks}) == len(chunks), "duplicate chunk digests")
    tensors = tuple(_tensor(t, chunks) for t in _list(doc, "tensors", MAX_TENSORS))
    _require(len({t.name for t in tensors}) == len(tensors), "duplicate tensor names")
    arts = doc.get("artifacts", {})
    _require(isinstance(arts, dict) and len(arts) <= 64, "`artifacts` must be a small object")
    artifacts = {_name(k, "artifact name"): _chunk(v) for k, v in arts.items()}
    versions = doc.get("framework_versions", {})
    _require(isinstance(versions, dict), "`framework_versions` must be an object")
    keys = _artifact_keys(doc.get("artifact_keys", {}) if version >= 2 else {}, artifacts)
    shards = tuple(_shard(s) for s in _list(doc, "shards", MAX_FILES)) if version >= 3 else ()
    _require(len({s.name for s in shards}) == len(shards), "duplicate shard names")
    files = _files(doc.get("files", {}) if version >= 3 else {})
    _require(not {s.name for s in shards} & set(files), "a name is both a shard and a file")
    return Manifest(
        model=ref.model,
        version=ref.version,
        target=ref.target,
        source_digest=check_digest(doc.get("source_digest")),
        framework=_name(doc.get("framework"), "framework"),
        framework_versions={_name(k, "framework"): str(v)[:64] for k, v in versions.items()},
        chunks=chunks,
        tensors=tensors,
        artifacts=artifacts,
        artifact_keys=keys,
        shards=shards,
        files=files,
    )


def _file_name(value: Any, what: str) -> str:
    try:
        return check_file_name(value)
    except ValueError as exc:
        raise ManifestError(f"invalid manifest: {what}: {exc}") from exc


def _shard(value: Any) -> ShardEntry:
    _require(isinstance(value, dict), "a shard must be an object")
    name = _file_name(value.get("name"), "shard name")
    entry = _chunk({"digest": value.get("digest"), "size": value.get("size")})
    return ShardEntry(name=name, digest=entry.digest, size=entry.size)


def _files(value: Any) -> dict[str, ChunkEntry]:
    ok = isinstance(value, dict) and len(value) <= MAX_FILES
    _require(ok, f"`files` must be an object of at most {MAX_FILES} entries")
    return {_file_name(k, "file name"): _chunk(v) for k, v in value.items()}


def _artifact_keys(value: Any, artifacts: dict[str, ChunkEntry]) -> dict[str, dict[str, str]]:
    _require(isinstance(value, dict), "`artifact_keys` must be an object")
    keys: dict[str, dict[str, str]] = {}
    for name, fields in value.items():
        _require(name in artifacts, f"`artifact_keys` names no artifact {name!r}")
        ok = isinstance(fields, dict) and 0 < len(fields) <= MAX_KEY_FIELDS
        _require(ok, f"key of artifact {name!r} must be an object of 1..{MAX_KEY_FIELDS} fields")
        keys[name] = {
            _name(k, "key field"): _name(v, f"key field {k!r} of artifact {name!r}")
            for k, v in fields.items()
        }
    return keys


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ManifestError(f"invalid manifest: {message}")


def _list(doc: dict[str, Any], key: str, limit: int) -> list[Any]:
    value = doc.get(key)
    if not isinstance(value, list) or len(value) > limit:
        raise ManifestError(f"invalid manifest: `{key}` must be a list of at most {limit}")
    return value


def _int(value: Any, what: str, high: int) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high
    _require(ok, f"{what} = {value!r}, must be an integer in [0, {high}]")
    return int(value)


def _name(value: Any, what: str) -> str:
    ok = isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS and "\x00" not in value
    _require(ok, f"{what} must be a non-empty string of at most {MAX_NAME_CHARS} characters")
    return str(value)


def _chunk(value: Any) -> ChunkEntry:
    _require(isinstance(value, dict), "a chunk must be an object")
    try:
        digest = check_digest(value.get("digest"))
    except ManifestError as exc:
        raise ManifestError(f"invalid manifest: {exc}") from exc
    return ChunkEntry(digest=digest, size=_int(value.get("size"), "chunk size", MAX_CHUNK_BYTES))


def _tensor(value: Any, chunks: tuple[ChunkEntry, ...]) -> TensorEntry:
    _require(isinstance(value, dict), "a tensor must be an object")
    name = _name(value.get("name"), "tensor name")
    dtype = value.get("dtype")
    # A str first: a list or object is unhashable, and `in` on a dict would raise TypeError.
    _require(
        isinstance(dtype, str) and dtype in DTYPES, f"tensor {name!r}: unknown dtype {dtype!r}"
    )
    raw_shape = value.get("shape")
    _require(isinstance(raw_shape, list) and len(raw_shape) <= 32, f"tensor {name!r}: bad shape")
    shape = tuple(_int(d, f"tensor {name!r} dimension", MAX_CHUNK_BYTES) for d in raw_shape)
    chunk = _int(value.get("chunk"), f"tensor {name!r} chunk", max(len(chunks) - 1, 0))
    _require(chunk < len(chunks), f"tensor {name!r} names a chunk that does not exist")
    offset = _int(value.get("offset"), f"tensor {name!r} offset", MAX_CHUNK_BYTES)
    nbytes = _int(value.get("nbytes"), f"tensor {name!r} nbytes", MAX_CHUNK_BYTES)
    _require(offset % ALIGNMENT == 0, f"tensor {name!r} offset is not {ALIGNMENT}-aligned")
    _require(
        math.prod(shape) * DTYPES[dtype][1] == nbytes, f"tensor {name!r}: nbytes != shape*dtype"
    )
    _require(
        offset + nbytes <= chunks[chunk].size, f"tensor {name!r} lies outside its chunk's bytes"
    )
    return TensorEntry(name, dtype, shape, chunk, offset, nbytes)
