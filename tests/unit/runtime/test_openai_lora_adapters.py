"""A request's LoRA adapter on `thaw serve`: split by the separator, checked against the
model's version folder (400 in Triton's frontend's words), listed after its model, and sent as
vLLM's `lora_name` in sampling_parameters, or as TensorRT-LLM's `lora_task_id` with the
adapter's tensors on its first use (the base model gets none)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from runtime.openai.errors import OpenAIError
from runtime.openai.lora import LoraAdapters, LoraRequest, Selection
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
    assert asyncio.run(loras.ids("gemma", "1", vllm=False)) == ["gemma"]  # no tensors there
    assert asyncio.run(LoraAdapters([repo], None).ids("gemma", "1", vllm=True)) == ["gemma"]


def test_an_offered_adapter_passes_and_another_is_refused_in_tritons_words(repo: Path) -> None:
    loras = LoraAdapters([repo], "_lora_")
    assert loras.split("gemma_lora_doll") == Selection("gemma", "doll")
    doll = asyncio.run(loras.request(Selection("gemma", "doll"), "gemma_lora_doll", "1", vllm=True))
    assert doll == LoraRequest("doll")
    assert asyncio.run(loras.request(Selection("gemma"), "gemma", "1", vllm=True)) is None
    with pytest.raises(OpenAIError) as refused:
        asyncio.run(loras.request(loras.split("gemma_lora_x"), "gemma_lora_x", "1", vllm=True))
    assert (refused.value.status, refused.value.param) == (400, "model")
    assert refused.value.message == "Unknown LoRA: x; for model: gemma_lora_x"


def test_the_adapter_reaches_a_vllm_style_model_as_lora_name() -> None:
    def sent(lora: str | None) -> dict[str, object]:
        asked = None if lora is None else LoraRequest(lora)
        request = generate_request(VLLM, "p", Sampling(), stream=False, echo=False, lora=asked)
        (params,) = [t for t in request.inputs if t.name == "sampling_parameters"]
        return dict(json.loads(np.asarray(params.data).reshape(-1)[0]))

    assert sent("doll")["lora_name"] == "doll"
    assert "lora_name" not in sent(None)


TRTLLM = ModelFace(
    name="llm",
    version="1",
    inputs={
        "text_input": ("BYTES", (1, 1)),
        "lora_task_id": ("UINT64", (1, 1)),
        "lora_weights": ("FP16", (-1, -1, -1)),
        "lora_config": ("INT32", (-1, -1, -1)),
    },
    outputs=frozenset({"text_output"}),
    vllm=False,
)


def test_a_trtllm_adapter_sends_its_task_id_and_its_tensors_once(tmp_path: Path) -> None:
    version = tmp_path / "llm" / "1"
    for name, weights in (("doll", np.ones((1, 4, 8), np.float32)), ("sheep", np.zeros((3, 2)))):
        (version / name).mkdir(parents=True)
        np.save(version / name / "model.lora_weights.npy", weights)
        np.save(
            version / name / "model.lora_config.npy", np.arange(6, dtype=np.int32).reshape(2, 3)
        )
    (version / "multi_lora.json").write_text(
        json.dumps({"doll": "llm/1/doll", "sheep": "llm/1/sheep"})
    )
    loras = LoraAdapters([tmp_path], "_lora_")
    assert asyncio.run(loras.ids("llm", "1", vllm=False)) == [
        "llm",
        "llm_lora_doll",
        "llm_lora_sheep",
    ]

    def sent(name: str) -> dict[str, np.ndarray]:
        lora = asyncio.run(loras.request(loras.split(name), name, "1", vllm=False))
        request = generate_request(TRTLLM, "p", Sampling(), stream=False, echo=False, lora=lora)
        return {t.name: np.asarray(t.data) for t in request.inputs}

    first = sent("llm_lora_sheep")
    assert first["lora_task_id"].reshape(-1).tolist() == [2]
    assert first["lora_weights"].shape == (1, 3, 2) and first["lora_weights"].dtype == np.float16
    assert first["lora_config"].shape == (1, 2, 3) and first["lora_config"].dtype == np.int32
    again = sent("llm_lora_sheep")  # TensorRT-LLM caches it by its task id
    assert set(again) == {"text_input", "lora_task_id"}
    assert sent("llm_lora_doll")["lora_weights"].shape == (1, 4, 8)  # already batched
    assert "lora_task_id" not in sent("llm")
    with pytest.raises(OpenAIError, match="Unknown LoRA: x; for model: llm_lora_x"):
        sent("llm_lora_x")


def test_a_model_that_declares_no_task_id_is_refused_not_served_by_its_base() -> None:
    plain = ModelFace(
        "llm", "1", {"text_input": ("BYTES", (1,))}, frozenset({"text_output"}), False
    )
    with pytest.raises(OpenAIError, match="declares no 'lora_task_id' input") as refused:
        generate_request(plain, "p", Sampling(), stream=False, echo=False,
                         lora=LoraRequest("doll", 1))  # fmt: skip
    assert refused.value.param == "model"
