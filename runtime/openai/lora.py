"""A request's LoRA adapter: its `model` split by `--lora-separator`, checked against the
adapters the model's version folder offers (thawwire.openai_lora, the rule `thaw up` shares).

    "gemma_lora_doll" ─▶ Selection(model "gemma", lora "doll")  (400 if gemma offers no "doll")
    /v1/models        ─▶ each model, then each `<model><separator><lora>` it offers
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runtime.openai.errors import OpenAIError
from thawwire.openai_lora import lora_model_id, read_lora_names, split_lora, unknown_lora_message

__all__ = ["LoraAdapters", "Selection"]


@dataclass(frozen=True, slots=True)
class Selection:
    """The model a request's `model` names, and the adapter it selects (None: the base)."""

    model: str
    lora: str | None = None


class LoraAdapters:
    """The LoRA adapters of the models in the repositories, under one separator (None: no
    LoRA selection, every name is a model's)."""

    def __init__(self, repositories: Sequence[Path], separator: str | None) -> None:
        self._repositories = tuple(repositories)
        self.separator = separator

    def split(self, asked: str) -> Selection:
        """The model and adapter `asked` names (the adapter not yet checked: `check`)."""
        model, lora = split_lora(asked, self.separator)
        return Selection(model, lora)

    async def names(self, model: str, version: str, *, vllm: bool) -> tuple[str, ...]:
        """The adapters `model`'s version `version` offers (() without a separator)."""
        if not self.separator or not version:
            return ()
        return await asyncio.to_thread(self._read, model, version, vllm)

    async def check(self, selection: Selection, asked: str, version: str, *, vllm: bool) -> None:
        """OpenAIError (400, Triton's frontend's words) when the model offers no such adapter."""
        if selection.lora is None:
            return
        if selection.lora not in await self.names(selection.model, version, vllm=vllm):
            raise OpenAIError(unknown_lora_message(selection.lora, asked), param="model")

    async def ids(self, model: str, version: str, *, vllm: bool) -> list[str]:
        """What `/v1/models` lists for `model`: its name, then each of its adapters'."""
        loras = await self.names(model, version, vllm=vllm)
        separator = self.separator or ""  # loras is () without one
        return [model, *(lora_model_id(model, lora, separator) for lora in loras)]

    def _read(self, model: str, version: str, vllm: bool) -> tuple[str, ...]:
        for repository in self._repositories:
            folder = repository / model / version
            if folder.is_dir():
                return read_lora_names(folder, vllm=vllm)
        return ()
