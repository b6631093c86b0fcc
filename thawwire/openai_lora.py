"""LoRA selection on the OpenAI routes, both servers' one rule (Triton's OpenAI frontend's
`--lora-separator`): the `<model><separator><lora>` name grammar, the adapters a model offers,
and the refusal of one it does not.

    "gemma_lora_doll" with separator "_lora_"  ─▶ model "gemma", LoRA "doll"
    a name the separator does not split in exactly two ─▶ the name itself, no LoRA
    a vLLM-style model's <model>/<version>/model.json {"enable_lora": true} (vllm_backend's
    own switch) and <model>/<version>/multi_lora.json {"doll": "<path>", ...} ─▶ the adapters,
    in file order; sent as sampling_parameters' `lora_name`
    any other model's multi_lora.json {"doll": "<folder, relative to the repository>", ...}
    ─▶ TensorRT-LLM adapters, task ids 1, 2, ... in file order; each folder inside the
    repository, holding model.lora_weights.npy and model.lora_config.npy (else not offered)

`thaw serve` (runtime.openai) lists, checks and sends them; `thaw up` lists and checks them from
its repository (nothing wakes for a model list or a LoRA the model lacks) and forwards the rest.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "LORA_LIST_FILE",
    "MAX_LORA_LIST_BYTES",
    "TRTLLM_LORA_FILES",
    "TrtllmAdapter",
    "lora_model_id",
    "parse_vllm_lora_names",
    "read_lora_names",
    "read_trtllm_adapters",
    "split_lora",
    "unknown_lora_message",
]

LORA_LIST_FILE = "multi_lora.json"
_ENGINE_ARGS_FILE = "model.json"
# Both files are a few lines; a bigger one is not read (untrusted input, read on every list).
MAX_LORA_LIST_BYTES = 1 << 20
_MAX_LORAS = 1024
# The two tensors a TensorRT-LLM adapter's folder holds (TensorRT-LLM's conversion writes them).
TRTLLM_LORA_FILES = ("model.lora_weights.npy", "model.lora_config.npy")


@dataclass(frozen=True, slots=True)
class TrtllmAdapter:
    """A TensorRT-LLM adapter: `task_id` names it to the engine (1, 2, ... in the list's
    order), `folder` holds its TRTLLM_LORA_FILES."""

    name: str
    task_id: int
    folder: Path


def split_lora(name: str, separator: str | None) -> tuple[str, str | None]:
    """(model, LoRA) a request's `model` names; (name, None) without a separator, or when the
    separator does not split the name in exactly two (Triton's frontend's rule)."""
    if not separator:
        return name, None
    parts = name.split(separator)
    if len(parts) != 2:
        return name, None
    return parts[0], parts[1]


def lora_model_id(model: str, lora: str, separator: str) -> str:
    """The id `/v1/models` lists for `model` with adapter `lora`."""
    return f"{model}{separator}{lora}"


def unknown_lora_message(lora: str, asked: str) -> str:
    """The refusal of a LoRA the model does not offer (`asked`: the request's whole `model`),
    in Triton's frontend's words (its test_lora.py matches them)."""
    return f"Unknown LoRA: {lora}; for model: {asked}"


def parse_vllm_lora_names(engine_args: bytes | None, lora_list: bytes | None) -> tuple[str, ...]:
    """The adapters a vLLM-style model offers, from its version folder's `model.json`
    (`engine_args`) and `multi_lora.json` (`lora_list`), None where a file is absent: only when
    its engine arguments say `"enable_lora": true` (or "true"), as vllm_backend loads them. A
    file that is not the expected JSON object offers none (Triton's frontend would then accept
    any LoRA name and send none: the base model would answer under the adapter's name)."""
    engine = _json_object(engine_args)
    if engine is None or str(engine.get("enable_lora", "")).lower() != "true":
        return ()
    listed = _json_object(lora_list)
    if listed is None:
        return ()
    names = [name for name in listed if isinstance(name, str) and name]
    return tuple(names[:_MAX_LORAS])


def read_lora_names(version_dir: Path, *, vllm: bool) -> tuple[str, ...]:
    """The adapters the model in `version_dir` offers: parse_lora_names of its files for a
    vLLM-style model, read_trtllm_adapters' names for any other (`version_dir` is
    <repository>/<model>/<version>). Blocking: call it from a thread."""
    if not vllm:
        return tuple(read_trtllm_adapters(version_dir, version_dir.parent.parent))
    return parse_vllm_lora_names(
        _read(version_dir / _ENGINE_ARGS_FILE), _read(version_dir / LORA_LIST_FILE)
    )


def read_trtllm_adapters(version_dir: Path, repository: Path) -> dict[str, TrtllmAdapter]:
    """A TensorRT-LLM-style model's adapters, by name, from `version_dir`'s multi_lora.json:
    each path relative to `repository`, its folder inside it (symbolic links resolved) with
    both TRTLLM_LORA_FILES; an entry that is not is not offered, and takes no task id. Task
    ids count the offered entries from 1, in file order (Triton's frontend's numbering).
    Blocking: call it from a thread."""
    listed = _json_object(_read(version_dir / LORA_LIST_FILE)) or {}
    root = os.path.realpath(repository)
    adapters: dict[str, TrtllmAdapter] = {}
    for name, path in listed.items():
        if len(adapters) >= _MAX_LORAS or not name or not isinstance(path, str) or not path:
            continue
        if os.path.isabs(path):
            continue
        folder = os.path.realpath(os.path.join(root, path))
        if os.path.commonpath([root, folder]) != root:
            continue  # outside the repository: a client never names a file
        if all(os.path.isfile(os.path.join(folder, f)) for f in TRTLLM_LORA_FILES):
            adapters[name] = TrtllmAdapter(name, len(adapters) + 1, Path(folder))
    return adapters


def _read(path: Path) -> bytes | None:
    try:
        with path.open("rb") as f:
            return f.read(MAX_LORA_LIST_BYTES + 1)
    except OSError:
        return None


def _json_object(raw: bytes | None) -> dict[str, object] | None:
    if raw is None or len(raw) > MAX_LORA_LIST_BYTES:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None
