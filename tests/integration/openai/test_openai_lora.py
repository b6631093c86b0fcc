"""LoRA selection through the `openai` client, unchanged, against a real `thaw serve
--lora-separator _lora_` (Triton's OpenAI frontend's flag and its test_lora.py's questions):
`/v1/models` lists each adapter a model's multi_lora.json offers, a request naming
`<model>_lora_<adapter>` reaches the model with vLLM's `lora_name` (or a TRT-LLM-style model
with `lora_task_id`, and its tensors on first use), and a LoRA the model does not offer is
refused in Triton's words; without the flag, such a name is no model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.fixtures import openai_models
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

SEP = "_lora_"
ASKING = [{"role": "user", "content": "When was the wheel invented?"}]


def _repo(factory: pytest.TempPathFactory) -> Any:
    repo = factory.mktemp("lora")
    openai_models.make_lora_vllm(repo)
    openai_models.make_params_vllm(repo)  # a vLLM-style model without adapters
    openai_models.make_lora_trtllm(repo)
    return repo


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    server = ServeProcess(_repo(tmp_path_factory), "--lora-separator", SEP)
    server.wait_ready()
    yield server
    server.stop()


def _client(server: ServeProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def _sent(text: str | None) -> dict[str, Any]:
    """The sampling_parameters the echo model received."""
    return dict(json.loads(text or "")["sampling_parameters"])


def test_the_model_list_names_each_adapter(serve: ServeProcess) -> None:
    with _client(serve) as client:
        ids = [model.id for model in client.models.list()]
        assert ids == [
            "lora_trtllm",
            "lora_trtllm_lora_doll",
            "lora_trtllm_lora_sheep",
            "lora_vllm",
            "lora_vllm_lora_doll",
            "lora_vllm_lora_sheep",
            "params_vllm",
        ]
        assert client.models.retrieve("lora_vllm_lora_doll").id == "lora_vllm_lora_doll"
        with pytest.raises(openai.NotFoundError):
            client.models.retrieve("lora_vllm_lora_unknown")


def test_a_named_adapter_reaches_the_model_as_lora_name(serve: ServeProcess) -> None:
    with _client(serve) as client:
        for lora in ("doll", "sheep"):
            name = f"lora_vllm{SEP}{lora}"
            completion = client.completions.create(model=name, prompt="hi", temperature=0)
            assert completion.model == name
            assert _sent(completion.choices[0].text)["lora_name"] == lora
            chat = client.chat.completions.create(model=name, messages=ASKING, top_p=1)
            assert chat.model == name
            assert _sent(chat.choices[0].message.content)["lora_name"] == lora
        stream = client.chat.completions.create(
            model=f"lora_vllm{SEP}doll", messages=ASKING, stream=True
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert {c.model for c in chunks} == {f"lora_vllm{SEP}doll"}
        assert _sent(text)["lora_name"] == "doll"
        base = client.completions.create(model="lora_vllm", prompt="hi")
        assert "lora_name" not in _sent(base.choices[0].text)


def test_an_adapter_the_model_lacks_is_refused_in_tritons_words(serve: ServeProcess) -> None:
    with _client(serve) as client:
        for model, lora in (("lora_vllm", "unknown"), ("params_vllm", "doll")):
            name = f"{model}{SEP}{lora}"
            with pytest.raises(openai.BadRequestError) as completion:
                client.completions.create(model=name, prompt="hi")
            with pytest.raises(openai.BadRequestError) as chat:
                client.chat.completions.create(model=name, messages=ASKING)
            for refused in (completion.value, chat.value):
                assert refused.body == {
                    "message": f"Unknown LoRA: {lora}; for model: {name}",
                    "type": "invalid_request_error",
                    "param": "model",
                    "code": None,
                }
        # a name the separator splits in three is a model's name, and no model has it
        with pytest.raises(openai.NotFoundError):
            client.completions.create(model=f"lora_vllm{SEP}doll{SEP}x", prompt="hi")


def test_without_the_separator_an_adapters_name_is_no_model(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    server = ServeProcess(_repo(tmp_path_factory))
    try:
        server.wait_ready()
        with _client(server) as client:
            ids = [m.id for m in client.models.list()]
            assert ids == ["lora_trtllm", "lora_vllm", "params_vllm"]
            with pytest.raises(openai.NotFoundError):
                client.completions.create(model=f"lora_vllm{SEP}doll", prompt="hi")
            base = client.completions.create(model="lora_vllm", prompt="hi")
            assert "lora_name" not in _sent(base.choices[0].text)
    finally:
        server.stop()


def test_a_trtllm_adapter_sends_its_task_id_and_once_its_tensors(serve: ServeProcess) -> None:
    with _client(serve) as client:

        def given(model: str) -> dict[str, Any]:
            answer = client.chat.completions.create(model=model, messages=ASKING)
            return dict(json.loads(answer.choices[0].message.content or ""))

        first = given(f"lora_trtllm{SEP}sheep")
        assert first["lora_task_id"] == 2  # the list's second adapter
        assert first["lora_weights"] == {"shape": [2, 8], "dtype": "float16", "sum": 32.0}
        assert first["lora_config"] == {"shape": [2, 3], "dtype": "int32", "sum": 6.0}
        again = given(f"lora_trtllm{SEP}sheep")  # TensorRT-LLM caches it by its task id
        assert again == {"lora_task_id": 2, "lora_weights": None, "lora_config": None}
        assert given(f"lora_trtllm{SEP}doll")["lora_weights"]["shape"] == [4, 8]
        assert given("lora_trtllm")["lora_task_id"] is None
        with pytest.raises(openai.BadRequestError, match="Unknown LoRA: x; for model: lora_trtllm"):
            given(f"lora_trtllm{SEP}x")
