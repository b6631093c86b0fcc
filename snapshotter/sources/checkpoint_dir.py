"""A safetensors checkpoint directory read strictly: its shards, its shard index, its other files.

    <version dir>/
        model-00001-of-00012.safetensors ... model-00012-of-00012.safetensors   shards
        model.safetensors.index.json        {"weight_map": {tensor: shard file name}}
        tokenizer.json, tokenizer_config.json, special_tokens_map.json, config.json, ...

`scan_checkpoint` refuses, with a `BuildError` naming the file, whatever would make an image
lie about its checkpoint or read outside the directory: a symlink leading out of the directory,
a special file (a FIFO would hang the read), an index that names a shard the directory lacks or
a path (`../x`, `/etc/x`), a gap in a numbered
`-NNNNN-of-NNNNN` set, a non-weight file over `MAX_FILE_BYTES`, a symlink out of the directory
anywhere below it. Hidden entries (`.cache/` that `huggingface-cli download --local-dir`
leaves, `.gitattributes`) and subdirectories are not part of the image. `check_weight_map`
then matches the index against the tensors the shards actually hold.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from snapshotter.errors import BuildError
from snapshotter.model_files import MAX_FILE_BYTES, MAX_FILES, check_file_name

logger = logging.getLogger(__name__)

SHARD_SUFFIX = ".safetensors"
INDEX_SUFFIX = ".safetensors.index.json"
MAX_INDEX_BYTES = 64 << 20
MAX_TREE_ENTRIES = 100_000
_NUMBERED = re.compile(r"^(?P<stem>.+)-(?P<k>\d{1,6})-of-(?P<n>\d{1,6})\.safetensors$")


@dataclass(frozen=True)
class CheckpointDir:
    """What a build takes from a checkpoint directory. `weight_map` (tensor name -> shard file
    name) is the index's, or None when the directory has no index."""

    root: Path
    shards: tuple[Path, ...]
    files: tuple[Path, ...]
    weight_map: dict[str, str] | None


def has_shards(root: Path) -> bool:
    """Whether `root` holds any `*.safetensors` entry (a build then reads it as a checkpoint)."""
    root = Path(root)
    return root.is_dir() and any(p.name.endswith(SHARD_SUFFIX) for p in root.iterdir())


def scan_checkpoint(root: Path) -> CheckpointDir:
    """The shards and files of checkpoint directory `root`, checked as the docstring says."""
    root = Path(root)
    real_root = root.resolve()
    shards: list[Path] = []
    files: list[Path] = []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith("."):
            continue
        try:
            check_file_name(entry.name)
        except ValueError as exc:
            raise BuildError(f"{entry}: {exc}") from exc
        mode = _checked_mode(entry, real_root)
        if stat.S_ISDIR(mode):
            continue
        if entry.name.endswith(SHARD_SUFFIX):
            shards.append(entry)
        elif entry.stat().st_size > MAX_FILE_BYTES:
            raise BuildError(
                f"{entry}: {entry.stat().st_size} bytes is over {MAX_FILE_BYTES} for a file "
                "stored beside the weights (tokenizer, config); move it out of the directory"
            )
        else:
            files.append(entry)
    if len(shards) > MAX_FILES or len(files) > MAX_FILES:
        raise BuildError(f"{root}: more than {MAX_FILES} shards or files")
    _check_subdirectories(root, real_root)
    weight_map = _weight_map(root, [f for f in files if f.name.endswith(INDEX_SUFFIX)], shards)
    if weight_map is None:
        _check_numbered(root, shards)
    else:
        shards = _indexed(root, shards, weight_map)
    return CheckpointDir(root, tuple(shards), tuple(files), weight_map)


def _indexed(root: Path, shards: list[Path], weight_map: dict[str, str]) -> list[Path]:
    """With an index, the shards it names are the checkpoint (as transformers and vLLM load
    it): another `*.safetensors` beside them, e.g. Mistral's `consolidated.safetensors` holding
    the same weights in one file, is left out of the image, with a log line."""
    named = set(weight_map.values())
    for shard in shards:
        if shard.name not in named:
            logger.info("%s: not named by the shard index, left out of the image", shard)
    return [shard for shard in shards if shard.name in named]


def check_weight_map(weight_map: dict[str, str], holders: dict[str, str]) -> None:
    """Raise unless the index's tensor -> shard map is exactly `holders` (what each shard's
    header says it holds)."""
    for name, shard in sorted(weight_map.items()):
        held_by = holders.get(name)
        if held_by is None:
            raise BuildError(f"the index names tensor {name!r} in {shard}, which no shard holds")
        if held_by != shard:
            raise BuildError(f"the index puts tensor {name!r} in {shard}; {held_by} holds it")
    extra = sorted(set(holders) - set(weight_map))
    if extra:
        raise BuildError(f"tensor {extra[0]!r} in {holders[extra[0]]} is not in the index")


def _checked_mode(entry: Path, real_root: Path) -> int:
    """The mode of what `entry` leads to: a regular file or a directory inside `real_root`."""
    if entry.is_symlink():
        target = entry.resolve()
        if not target.is_relative_to(real_root):
            raise BuildError(f"{entry} is a symlink to {target}, outside the model directory")
    try:
        mode = entry.stat().st_mode
    except OSError as exc:
        raise BuildError(f"{entry} cannot be read: {exc.strerror}") from exc
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise BuildError(f"{entry} is not a regular file")
    return mode


def _check_subdirectories(root: Path, real_root: Path) -> None:
    """Subdirectories are not imaged, but the source digest reads every file under `root`: a
    symlink anywhere below it must not lead out of it either."""
    seen = 0
    for parent, dirs, names in os.walk(root):  # does not follow symlinked directories
        if Path(parent) == root:
            continue
        for name in [*dirs, *names]:
            seen += 1
            if seen > MAX_TREE_ENTRIES:
                raise BuildError(f"{root}: more than {MAX_TREE_ENTRIES} entries below it")
            path = Path(parent) / name
            if path.is_symlink() and not path.resolve().is_relative_to(real_root):
                raise BuildError(
                    f"{path} is a symlink to {path.resolve()}, outside the model directory"
                )


def _weight_map(root: Path, indexes: list[Path], shards: list[Path]) -> dict[str, str] | None:
    if not indexes:
        return None
    if len(indexes) > 1:
        raise BuildError(f"{root}: more than one shard index: {', '.join(p.name for p in indexes)}")
    index = indexes[0]
    if index.stat().st_size > MAX_INDEX_BYTES:
        raise BuildError(f"{index}: over {MAX_INDEX_BYTES} bytes")
    try:
        doc = json.loads(index.read_bytes())
    except (ValueError, RecursionError) as exc:
        raise BuildError(f"{index}: not valid JSON: {exc}") from exc
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise BuildError(f"{index}: `weight_map` must be a non-empty object")
    present = {p.name for p in shards}
    for tensor, shard in weight_map.items():
        try:
            check_file_name(shard)
        except ValueError as exc:
            raise BuildError(f"{index}: tensor {tensor!r}: shard {exc}") from exc
        if not shard.endswith(SHARD_SUFFIX):
            raise BuildError(f"{index}: tensor {tensor!r} names {shard!r}, not a .safetensors")
        if shard not in present:
            raise BuildError(f"{index} names shard {shard}, which is not in {root}")
    return {str(k): str(v) for k, v in weight_map.items()}


def _check_numbered(root: Path, shards: list[Path]) -> None:
    """Without an index, a numbered set (`-00003-of-00012`) must have every number."""
    sets: dict[tuple[str, int], set[int]] = {}
    for shard in shards:
        match = _NUMBERED.match(shard.name)
        if match:
            key = (match["stem"], int(match["n"]))
            sets.setdefault(key, set()).add(int(match["k"]))
    for (stem, total), have in sorted(sets.items()):
        outside = sorted(k for k in have if not 1 <= k <= total)
        if outside:
            raise BuildError(f"{root}: {stem} shard number {outside[0]} is outside 1..{total}")
        missing = sorted(set(range(1, total + 1)) - have)
        if missing:
            raise BuildError(
                f"{root}: {stem} shard {missing[0]} of {total} is missing "
                f"(have {len(have)} of {total})"
            )
