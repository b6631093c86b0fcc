"""LoRA selection through a real `thaw up --lora-separator _lora_` with its model at zero: the
model list names each adapter without waking anything, a LoRA the model does not offer is
refused without waking it, and a request naming an adapter wakes the model and reaches it as
vLLM's `lora_name`, or TensorRT-LLM's task id and tensors (the replica given the separator by
`thaw up`)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest

from tests.fixtures import openai_models
from tests.fixtures.up_process import UpProcess, light_args, with_params

pytestmark = pytest.mark.integration

SEP = "_lora_"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("openai_up_lora")
    with_params(openai_models.make_lora_vllm(repo), max_replicas=1)
    with_params(openai_models.make_lora_trtllm(repo), max_replicas=1)
    server = UpProcess(
        repo,
        *light_args(repo),
        "--lora-separator", SEP,
    )  # fmt: skip
    yield server
    server.stop()


def test_an_adapter_wakes_the_model_and_reaches_it(up: UpProcess) -> None:
    with openai.OpenAI(base_url=up.url + "/v1", api_key="none", max_retries=0, timeout=120) as c:
        ids = [model.id for model in c.models.list()]
        assert ids == [
            "lora_trtllm",
            f"lora_trtllm{SEP}doll",
            f"lora_trtllm{SEP}sheep",
            "lora_vllm",
            f"lora_vllm{SEP}doll",
            f"lora_vllm{SEP}sheep",
        ]
        assert c.models.retrieve(f"lora_vllm{SEP}sheep").id == f"lora_vllm{SEP}sheep"
        with pytest.raises(openai.BadRequestError) as refused:
            c.completions.create(model=f"lora_vllm{SEP}unknown", prompt="hi")
        message = f"Unknown LoRA: unknown; for model: lora_vllm{SEP}unknown"
        assert refused.value.body == {  # as thaw serve answers it
            "message": message,
            "type": "invalid_request_error",
            "param": "model",
            "code": None,
        }
        assert len(up.model("lora_vllm")["replicas"]) == 0  # nothing woke for either
        name = f"lora_vllm{SEP}doll"
        completion = c.completions.create(model=name, prompt="hi")
        assert completion.model == name
        sent = json.loads(completion.choices[0].text)["sampling_parameters"]
        assert sent["lora_name"] == "doll"
        stream = c.chat.completions.create(
            model=f"lora_vllm{SEP}sheep", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
        trtllm = c.chat.completions.create(
            model=f"lora_trtllm{SEP}doll", messages=[{"role": "user", "content": "hi"}]
        )
    assert json.loads(text)["sampling_parameters"]["lora_name"] == "sheep"
    given = json.loads(trtllm.choices[0].message.content or "")
    assert given["lora_task_id"] == 1 and given["lora_weights"]["shape"] == [4, 8]
