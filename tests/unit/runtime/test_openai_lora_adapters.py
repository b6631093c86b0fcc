"""A request's LoRA adapter on `thaw serve`: split by the separator, checked against the
model's version folder (400 in Triton's frontend's words), listed after its model, and sent as
vLLM's `lora_name` in sampling_parameters (the base model gets none)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from runtime.openai.errors import OpenAIError
from runtime.openai.lora import LoraAdapters, Selection
from runtime.openai.schema import Sampling
from runtime.openai.triton_mapping import ModelFace, generate_request

VLLM = ModelFace(
    name="gemma",
    version="1",
    inputs={"text_input": ("BYTES", (1,)), "sampling_parameters": ("BYTES", (1,))},
    outputs=frozenset({"text_output"}),
    vllm=True,
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    version = tmp_path / "gemma" / "1"
    version.mkdir(parents=True)
    (version / "model.json").write_text(json.dumps({"enable_lora": True}))
    (version / "multi_lora.json").write_text(json.dumps({"doll": "d", "sheep": "s"}))
    return tmp_path


def test_the_model_list_names_each_adapter_after_its_model(repo: Path) -> None:
    loras = LoraAdapters([repo], "_lora_")
    ids = asyncio.run(loras.ids("gemma", "1", vllm=True))
    assert ids == ["gemma", "gemma_lora_doll", "gemma_lora_sheep"]
    assert asyncio.run(loras.ids("gemma", "1", vllm=False)) == ["gemma"]  # TRT-LLM: none
    assert asyncio.run(LoraAdapters([repo], None).ids("gemma", "1", vllm=True)) == ["gemma"]


def test_an_offered_adapter_passes_and_another_is_refused_in_tritons_words(repo: Path) -> None:
    loras = LoraAdapters([repo], "_lora_")
    assert loras.split("gemma_lora_doll") == Selection("gemma", "doll")
    asyncio.run(loras.check(Selection("gemma", "doll"), "gemma_lora_doll", "1", vllm=True))
    asyncio.run(loras.check(Selection("gemma"), "gemma", "1", vllm=True))  # the base model
    with pytest.raises(OpenAIError) as refused:
        asyncio.run(loras.check(loras.split("gemma_lora_x"), "gemma_lora_x", "1", vllm=True))
    assert (refused.value.status, refused.value.param) == (400, "model")
    assert refused.value.message == "Unknown LoRA: x; for model: gemma_lora_x"


def test_the_adapter_reaches_a_vllm_style_model_as_lora_name() -> None:
    def sent(lora: str | None) -> dict[str, object]:
        request = generate_request(VLLM, "p", Sampling(), stream=False, echo=False, lora=lora)
        (params,) = [t for t in request.inputs if t.name == "sampling_parameters"]
        return dict(json.loads(np.asarray(params.data).reshape(-1)[0]))

    assert sent("doll")["lora_name"] == "doll"
    assert "lora_name" not in sent(None)
