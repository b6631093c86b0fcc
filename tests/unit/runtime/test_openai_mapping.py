"""OpenAI bodies parsed strictly (runtime.openai.schema) and mapped onto a model's declared
inputs the way Triton's OpenAI frontend maps them (runtime.openai.triton_mapping)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from runtime.inference import InferResponse, InferTensor
from runtime.openai.errors import OpenAIError
from runtime.openai.schema import (
    MAX_CHOICES,
    Sampling,
    parse_body,
    parse_chat,
    parse_completion,
    parse_embedding,
)
from runtime.openai.triton_mapping import (
    ModelFace,
    embedding_of,
    embedding_request,
    generate_request,
    text_of,
    token_counts,
)
from thawwire.openai_api import DEFAULT_MAX_TOKENS


def _face(inputs: dict[str, tuple[str, list[int]]], outputs: list[str], backend: str = "python"):
    metadata = {
        "versions": ["1"],
        "inputs": [{"name": n, "datatype": d, "shape": s} for n, (d, s) in inputs.items()],
        "outputs": [{"name": n, "datatype": "BYTES", "shape": [-1]} for n in outputs],
    }
    return ModelFace.of("m", metadata, {"backend": backend})


TRTLLM = _face(
    {
        "text_input": ("BYTES", [1, 1]),
        "stream": ("BOOL", [1, 1]),
        "max_tokens": ("INT32", [1, 1]),
        "temperature": ("FP32", [1, 1]),
        "seed": ("UINT64", [1, 1]),
        "stop_words": ("BYTES", [1, -1]),
    },
    ["text_output"],
)
VLLM = _face(
    {
        "text_input": ("BYTES", [1]),
        "stream": ("BOOL", [1]),
        "sampling_parameters": ("BYTES", [1]),
        "exclude_input_in_output": ("BOOL", [1]),
        "return_num_input_tokens": ("BOOL", [1]),
        "return_num_output_tokens": ("BOOL", [1]),
    },
    ["text_output", "num_input_tokens", "num_output_tokens"],
)


def _inputs(request: Any) -> dict[str, np.ndarray]:
    return {t.name: t.data for t in request.inputs}


def test_trtllm_style_gets_each_field_as_its_own_tensor_and_only_declared_ones() -> None:
    sampling = Sampling(max_tokens=9, temperature=0.5, seed=-1, top_p=0.3, stop=("x", "yz"))
    request = generate_request(TRTLLM, "hi", sampling, stream=True, echo=False)
    got = _inputs(request)
    assert set(got) == {"text_input", "stream", "max_tokens", "temperature", "seed", "stop_words"}
    assert got["text_input"].shape == (1, 1) and got["text_input"][0, 0] == b"hi"
    assert got["max_tokens"].dtype == np.int32 and got["max_tokens"][0, 0] == 9
    assert got["seed"][0, 0] == (1 << 64) - 1  # a negative seed wraps into UINT64
    assert got["stop_words"].shape == (1, 2)  # the variable dim takes every stop word
    assert bool(got["stream"][0, 0]) is True


def test_vllm_style_gets_the_sampling_fields_as_one_json_and_the_default_max_tokens() -> None:
    request = generate_request(VLLM, "hi", Sampling(temperature=0.0), stream=False, echo=True)
    got = _inputs(request)
    assert json.loads(got["sampling_parameters"][0]) == {
        "max_tokens": DEFAULT_MAX_TOKENS,
        "temperature": 0.0,  # zero is a value, not "unset"
    }
    assert bool(got["exclude_input_in_output"][0]) is False
    assert bool(got["return_num_input_tokens"][0]) is True


def test_a_model_without_text_input_and_text_output_is_not_generative() -> None:
    face = _face({"INPUT0": ("FP32", [-1])}, ["OUTPUT0"])
    with pytest.raises(OpenAIError, match="not a generative model") as refused:
        generate_request(face, "x", Sampling(), stream=False, echo=False)
    assert refused.value.status == 400 and refused.value.param == "model"
    with pytest.raises(OpenAIError, match="not an embedding model"):
        embedding_request(face, "x", dimensions=None)


def test_fixed_dims_that_cannot_hold_the_values_are_the_models_fault() -> None:
    face = _face({"text_input": ("BYTES", [1]), "stop_words": ("BYTES", [1])}, ["text_output"])
    with pytest.raises(OpenAIError) as refused:
        generate_request(face, "x", Sampling(stop=("a", "b")), stream=False, echo=False)
    assert refused.value.status == 500


def test_embedding_conventions() -> None:
    vllm = _face({"embedding_request": ("BYTES", [1])}, ["text_output"])
    doc = json.loads(_inputs(embedding_request(vllm, "hey", dimensions=4))["embedding_request"][0])
    assert doc == {"input": "hey", "pooling_params": {"dimensions": [4]}}
    plain = _face({"text_input": ("BYTES", [1])}, ["embedding"])
    with pytest.raises(OpenAIError, match="dimensions"):
        embedding_request(plain, "hey", dimensions=4)
    vector = InferTensor("embedding", "FP32", (3,), np.array([1, 2, 3], dtype=np.float32))
    assert embedding_of(InferResponse("m", "1", [vector])) == [1.0, 2.0, 3.0]
    text = np.array([b"[0.5, 1]"], dtype=np.object_)
    as_json = InferResponse("m", "1", [InferTensor("text_output", "BYTES", (1,), text)])
    assert embedding_of(as_json) == [0.5, 1.0]


def test_responses_read_back_as_text_and_counts() -> None:
    text = np.array([b"ab", b"c"], dtype=np.object_)
    counts = [
        InferTensor("num_input_tokens", "INT32", (1,), np.array([4], dtype=np.int32)),
        InferTensor("num_output_tokens", "UINT32", (1,), np.array([2], dtype=np.uint32)),
    ]
    response = InferResponse("m", "1", [InferTensor("text_output", "BYTES", (2,), text), *counts])
    assert text_of(response) == "abc"
    assert token_counts(response) == (4, 2)
    assert token_counts(InferResponse("m", "1", counts[:1])) is None


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x"}, "model"),
        ({"model": "m"}, "prompt"),
        ({"model": "m", "prompt": [1, 2]}, "prompt"),
        ({"model": "m", "prompt": ""}, "prompt"),
        ({"model": "m", "prompt": ["a", ""]}, "prompt"),
        ({"model": "m", "prompt": "x", "n": 0}, "n"),
        ({"model": "m", "prompt": "x", "n": True}, "n"),
        ({"model": "m", "prompt": ["a", "b"], "n": MAX_CHOICES}, "n"),
        ({"model": "m", "prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"model": "m", "prompt": "x", "top_p": 1.5}, "top_p"),
        ({"model": "m", "prompt": "x", "seed": 1 << 70}, "seed"),
        ({"model": "m", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"model": "m", "prompt": "x", "logprobs": 6}, "logprobs"),
        ({"model": "m", "prompt": "x", "logprobs": True}, "logprobs"),
        (
            {"model": "m", "prompt": "x", "stream_options": {"include_usage": True}},
            "stream_options",
        ),
    ],
)
def test_completion_bodies_refused_with_the_field_named(body: dict[str, Any], param: str) -> None:
    with pytest.raises(OpenAIError) as refused:
        parse_completion(body)
    assert refused.value.param == param and refused.value.status == 400


def test_chat_bodies() -> None:
    asked = parse_chat(
        {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                }
            ],
            "max_completion_tokens": 3,
            "max_tokens": 99,
        }
    )
    assert asked.messages[0].content == "ab" and asked.sampling.max_tokens == 3
    for messages in ([], [{"role": "robot", "content": "x"}], [{"role": "user", "content": 5}]):
        with pytest.raises(OpenAIError):
            parse_chat({"model": "m", "messages": messages})
    for role in ("user", "system", "developer", "tool"):
        message = {"role": role, "tool_call_id": "c1"} if role == "tool" else {"role": role}
        with pytest.raises(OpenAIError, match=r"messages\[0\]\.content is required") as refused:
            parse_chat({"model": "m", "messages": [message]})
        assert refused.value.param == "messages[0].content"
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    turn = parse_chat({"model": "m", "messages": [{"role": "assistant", "tool_calls": calls}]})
    assert turn.messages[0].content == ""  # an assistant's turn may be tool calls alone
    with pytest.raises(OpenAIError, match=r"tools\[0\]\.function must be an object"):
        parse_chat(
            {
                "model": "m",
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function"}],
            }
        )


def test_embedding_bodies_and_hostile_json() -> None:
    assert parse_embedding({"model": "m", "input": "a"}).inputs == ("a",)
    for body in ({"model": "m", "input": []}, {"model": "m", "input": [""]}, {"model": "m"}):
        with pytest.raises(OpenAIError):
            parse_embedding(body)
    with pytest.raises(OpenAIError, match="nested deeper"):
        parse_body(b'{"a": ' + b"[" * 100 + b"]" * 100 + b"}")
    with pytest.raises(OpenAIError, match="JSON object"):
        parse_body(b'"text"')


@pytest.mark.parametrize("role", [[], {}, ["user"]])
def test_a_role_that_is_a_list_or_an_object_is_refused(role: Any) -> None:
    """Found by fuzzing (`{"messages": [{"role": [], "content": null}]}`): the role was looked
    up in a frozenset, and an unhashable one raised TypeError, a 500."""
    with pytest.raises(OpenAIError) as refused:
        parse_chat({"model": "m", "messages": [{"role": role, "content": "x"}]})
    assert refused.value.param == "messages[0].role" and refused.value.status == 400


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_are_not_json(constant: bytes) -> None:
    """Found by fuzzing (a tool's `parameters` {"items": {"minimum": Infinity}} with
    tool_choice "required"): Python's json module reads these, so the schema reached the model
    as guide text holding `Infinity`, which is no JSON for its guided decoding to parse (nor
    for OpenAI's API, which refuses such a body)."""
    schema = b'{"type": "json_schema", "json_schema": {"name": "n", "schema": {"minimum": %s}}}'
    for body in (
        b'{"model": "m", "prompt": "x", "temperature": %s}' % constant,
        b'{"model": "m", "prompt": "x", "response_format": %s}' % (schema % constant),
    ):
        with pytest.raises(OpenAIError, match=f"not valid JSON: {constant.decode()} is not"):
            parse_body(body)
    arguments = '{"a": ' + constant.decode() + "}"
    call = {"id": "1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages = [{"role": "assistant", "tool_calls": [call]}]
    with pytest.raises(OpenAIError, match="arguments must be a JSON object, as text"):
        parse_chat({"model": "m", "messages": messages})
