"""LoRA selection on the OpenAI routes, both servers' one rule (Triton's OpenAI frontend's
`--lora-separator`): the `<model><separator><lora>` name grammar, the adapters a model offers,
and the refusal of one it does not.

    "gemma_lora_doll" with separator "_lora_"  ─▶ model "gemma", LoRA "doll"
    a name the separator does not split in exactly two ─▶ the name itself, no LoRA
    a vLLM-style model's <model>/<version>/model.json {"enable_lora": true} (vllm_backend's
    own switch) and <model>/<version>/multi_lora.json {"doll": "<path>", ...} ─▶ the adapters,
    in file order; sent as sampling_parameters' `lora_name`

`thaw serve` (runtime.openai) lists, checks and sends them; `thaw up` lists and checks them from
its repository (nothing wakes for a model list or a LoRA the model lacks) and forwards the rest.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = [
    "LORA_LIST_FILE",
    "MAX_LORA_LIST_BYTES",
    "lora_model_id",
    "parse_lora_names",
    "read_lora_names",
    "split_lora",
    "unknown_lora_message",
]

LORA_LIST_FILE = "multi_lora.json"
_ENGINE_ARGS_FILE = "model.json"
# Both files are a few lines; a bigger one is not read (untrusted input, read on every list).
MAX_LORA_LIST_BYTES = 1 << 20
_MAX_LORAS = 1024


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


def parse_lora_names(
    engine_args: bytes | None, lora_list: bytes | None, *, vllm: bool
) -> tuple[str, ...]:
    """The adapters a model offers, from its version folder's `model.json` (`engine_args`) and
    `multi_lora.json` (`lora_list`), None where a file is absent. A vLLM-style model offers them
    only when its engine arguments say `"enable_lora": true` (or "true"), as vllm_backend loads
    them. Any other model offers none: TensorRT-LLM's adapters (`lora_task_id` and the weights'
    tensors) are not sent yet. A file that is not the expected JSON object offers none (Triton's
    frontend would then accept any LoRA name and send none: the base model would answer under
    the adapter's name)."""
    if not vllm:
        return ()
    engine = _json_object(engine_args)
    if engine is None or str(engine.get("enable_lora", "")).lower() != "true":
        return ()
    listed = _json_object(lora_list)
    if listed is None:
        return ()
    names = [name for name in listed if isinstance(name, str) and name]
    return tuple(names[:_MAX_LORAS])


def read_lora_names(version_dir: Path, *, vllm: bool) -> tuple[str, ...]:
    """parse_lora_names of the files in `version_dir` (blocking: call it from a thread)."""
    return parse_lora_names(
        _read(version_dir / _ENGINE_ARGS_FILE), _read(version_dir / LORA_LIST_FILE), vllm=vllm
    )


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
