"""A request's LoRA adapter: its `model` split by `--lora-separator`, checked against the
adapters the model's version folder offers (thawwire.openai_lora, the rule `thaw up` shares),
and what the model is sent for it.

    "gemma_lora_doll" ─▶ Selection(model "gemma", lora "doll")
        vLLM style      ─▶ LoraRequest("doll"): sampling_parameters' `lora_name`
        TRT-LLM style   ─▶ LoraRequest("doll", task_id 1[, weights, config]): the tensors on
                           the adapter's first use by this server, the task id alone after
                           (TensorRT-LLM caches an adapter by its task id)
        not offered     ─▶ 400 in Triton's frontend's words
    /v1/models          ─▶ each model, then each `<model><separator><lora>` it offers
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runtime.openai.errors import OpenAIError
from thawwire.openai_lora import (
    TRTLLM_LORA_FILES,
    TrtllmAdapter,
    lora_model_id,
    read_lora_names,
    read_trtllm_adapters,
    split_lora,
    unknown_lora_message,
)

__all__ = ["LoraAdapters", "LoraRequest", "Selection"]


@dataclass(frozen=True, slots=True)
class Selection:
    """The model a request's `model` names, and the adapter it selects (None: the base)."""

    model: str
    lora: str | None = None


@dataclass(frozen=True, slots=True)
class LoraRequest:
    """What a request sends for its adapter: vLLM's `lora_name`, or TensorRT-LLM's `task_id`
    with, on the adapter's first use, its `weights` and `config` tensors (as their .npy files
    hold them)."""

    name: str
    task_id: int | None = None
    weights: np.ndarray | None = None
    config: np.ndarray | None = None


class LoraAdapters:
    """The LoRA adapters of the models in the repositories, under one separator (None: no
    LoRA selection, every name is a model's)."""

    def __init__(self, repositories: Sequence[Path], separator: str | None) -> None:
        self._repositories = tuple(repositories)
        self.separator = separator
        # TensorRT-LLM adapters whose tensors this server has sent: (model, version, name).
        # As in Triton's frontend, once per server process (a model reloaded since keeps its
        # adapters only if its engine still caches them).
        self._registered: set[tuple[str, str, str]] = set()

    def split(self, asked: str) -> Selection:
        """The model and adapter `asked` names (the adapter not yet checked: `request`)."""
        model, lora = split_lora(asked, self.separator)
        return Selection(model, lora)

    async def names(self, model: str, version: str, *, vllm: bool) -> tuple[str, ...]:
        """The adapters `model`'s version `version` offers (() without a separator)."""
        if not self.separator or not version:
            return ()
        return await asyncio.to_thread(self._names, model, version, vllm)

    async def ids(self, model: str, version: str, *, vllm: bool) -> list[str]:
        """What `/v1/models` lists for `model`: its name, then each of its adapters'."""
        loras = await self.names(model, version, vllm=vllm)
        separator = self.separator or ""  # loras is () without one
        return [model, *(lora_model_id(model, lora, separator) for lora in loras)]

    async def request(
        self, selection: Selection, asked: str, version: str, *, vllm: bool
    ) -> LoraRequest | None:
        """What the model is sent for the selected adapter (None: the base model);
        OpenAIError (400, Triton's frontend's words) when the model offers no such adapter."""
        lora = selection.lora
        if lora is None:
            return None
        refusal = OpenAIError(unknown_lora_message(lora, asked), param="model")
        if vllm:
            if lora not in await self.names(selection.model, version, vllm=True):
                raise refusal
            return LoraRequest(lora)
        found = await asyncio.to_thread(self._trtllm, selection.model, version)
        adapter = found.get(lora)
        if adapter is None:
            raise refusal
        key = (selection.model, version, lora)
        if key in self._registered:
            return LoraRequest(lora, adapter.task_id)
        weights, config = await asyncio.to_thread(_tensors, selection.model, adapter)
        self._registered.add(key)
        return LoraRequest(lora, adapter.task_id, weights, config)

    def _folder(self, model: str, version: str) -> tuple[Path, Path] | None:
        """(version folder, its repository) of the first repository holding the model."""
        for repository in self._repositories:
            folder = repository / model / version
            if folder.is_dir():
                return folder, repository
        return None

    def _trtllm(self, model: str, version: str) -> dict[str, TrtllmAdapter]:
        found = self._folder(model, version) if self.separator else None
        return read_trtllm_adapters(*found) if found else {}

    def _names(self, model: str, version: str, vllm: bool) -> tuple[str, ...]:
        found = self._folder(model, version)
        return read_lora_names(found[0], vllm=vllm) if found else ()


def _tensors(model: str, adapter: TrtllmAdapter) -> tuple[np.ndarray, np.ndarray]:
    """An adapter's weights and config, from its .npy files (blocking: in a thread)."""
    try:
        weights, config = (
            np.load(adapter.folder / name, allow_pickle=False) for name in TRTLLM_LORA_FILES
        )
    except (OSError, ValueError) as exc:
        raise OpenAIError(
            f"model '{model}': LoRA '{adapter.name}': its tensors could not be read "
            f"({type(exc).__name__})",
            status=500,
        ) from None
    return weights, config
