"""Synthetic LLM checkpoints for the restore benchmarks: one file, or numbered shards with an index.

- `write_checkpoint(dir, gib, shards=1)`: `model.safetensors` of `gib` GiB of fp16 tensors;
- `write_checkpoint(dir, gib, shards=N)`: `model-0000k-of-0000N.safetensors` shards, their
  `model.safetensors.index.json` and the tokenizer files (`tokenizer.json` of about 2 MB,
  `tokenizer_config.json`, `special_tokens_map.json`, `config.json`), as a Hugging Face
  checkpoint directory has them.

Tensors are 64 MiB each (smaller ones where a shard needs them to fill its share), every one
distinct so content addressing cannot fold them, written one at a time: the generator never
holds more than one tensor. Both benchmarks (`restore.py`, `gpu_check.py`) use it so their
sharded rows compare like with like.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

__all__ = ["TOKENIZER_FILES", "write_checkpoint"]

TENSOR_BYTES = 64 << 20
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def write_checkpoint(version_dir: Path, gib: float, *, shards: int = 1, seed: int = 0) -> int:
    """Write the checkpoint into `version_dir`; return its weight bytes."""
    version_dir.mkdir(parents=True, exist_ok=True)
    total = int(gib * (1 << 30))
    per_shard = [total // shards + (1 if k < total % shards else 0) for k in range(shards)]
    block = np.random.default_rng(seed).integers(0, 1 << 16, TENSOR_BYTES // 2, dtype=np.uint16)
    weight_map: dict[str, str] = {}
    serial = written = 0
    for k, nbytes in enumerate(per_shard, start=1):
        name = "model.safetensors" if shards == 1 else f"model-{k:05d}-of-{shards:05d}.safetensors"
        sizes = [TENSOR_BYTES] * (nbytes // TENSOR_BYTES)
        if nbytes % TENSOR_BYTES >= 2:
            sizes.append(nbytes % TENSOR_BYTES // 2 * 2)
        header, pos = {}, 0
        for size in sizes:
            tensor = f"model.layers.{serial}.weight"
            offsets = [pos, pos + size]
            header[tensor] = {"dtype": "F16", "shape": [size // 2], "data_offsets": offsets}
            weight_map[tensor] = name
            pos, serial = pos + size, serial + 1
        written += pos
        head = json.dumps(header).encode()
        with (version_dir / name).open("wb") as f:
            f.write(len(head).to_bytes(8, "little") + head)
            for i, size in enumerate(sizes):
                mark = serial - len(sizes) + i
                block[:4] = np.frombuffer(mark.to_bytes(8, "little"), dtype=np.uint16)
                f.write(block[: size // 2].tobytes())
    if shards > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (version_dir / "model.safetensors.index.json").write_text(json.dumps(index))
        _tokenizer_files(version_dir, serial)
    return written


def _tokenizer_files(version_dir: Path, layers: int) -> None:
    vocab = {f"tok{i}": i for i in range(100_000)}  # ~2 MB of JSON, as a real BPE tokenizer
    (version_dir / "tokenizer.json").write_text(
        json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": vocab, "merges": []}})
    )
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    (version_dir / "tokenizer_config.json").write_text(
        json.dumps({**special, "model_max_length": 4096, "tokenizer_class": "LlamaTokenizer"})
    )
    (version_dir / "special_tokens_map.json").write_text(json.dumps(special))
    (version_dir / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": layers})
    )
