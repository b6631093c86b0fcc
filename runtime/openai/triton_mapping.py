"""OpenAI requests as Triton tensors, and Triton responses back as text, counts and vectors.

Pure: callers pass the model's v2 metadata and config. The conventions are Triton's OpenAI
frontend's (python/openai in triton-inference-server/server), read from a model's inputs:

    a generative model    inputs text_input (BYTES) [, stream (BOOL)], output text_output (BYTES)
      vLLM style          declares `sampling_parameters` (or backend "vllm"): the sampling
                          fields as one JSON string; exclude_input_in_output = not echo
      TRT-LLM / Python    max_tokens, temperature, top_p, seed, stop_words, frequency_penalty,
                          presence_penalty, exclude_input_in_output: each its own tensor
      both                return_num_input_tokens / return_num_output_tokens = true, read back
                          from outputs num_input_tokens / num_output_tokens (usage)
      logprobs            vLLM style with a `logprobs` output only: return_logprobs = true and
                          sampling_parameters' `logprobs` = tokens per position; the output
                          read by runtime.openai.logprobs
      a guide             what the text must follow (a named tool's parameters, or
                          response_format): vLLM style, sampling_parameters' `structured_outputs`
                          = the JSON text of vLLM's StructuredOutputsParams {"json": schema
                          text} or {"json_object": true}, as vllm_backend reads it; TRT-LLM /
                          Python, guided_decoding_guide_type = "json_schema" and
                          guided_decoding_guide = the schema text, or the type "json" alone
      a LoRA adapter      (runtime.openai.lora checked the model offers it) vLLM style,
                          sampling_parameters' `lora_name`; TRT-LLM / Python, lora_task_id and,
                          on its first use, lora_weights and lora_config (the task id must be
                          declared: a model without it is refused, not served by its base)
    an embedding model    vLLM style: input embedding_request (JSON) -> text_output (a JSON
                          list); plain: text_input (BYTES) -> embedding (FP32/FP16/FP64)

Only inputs the model declares are sent: a model that declares no `max_tokens` gets none.
Each response's `text_output` is the text generated since the previous response (a delta).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime.datatypes import v2_to_numpy
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.openai.errors import OpenAIError
from runtime.openai.logprobs import TokenLogprob, parse_logprobs
from runtime.openai.lora import LoraRequest
from runtime.openai.response_format import Guide, GuideKind
from runtime.openai.schema import Sampling
from thawwire.openai_api import DEFAULT_MAX_TOKENS

__all__ = [
    "ModelFace",
    "embedding_of",
    "embedding_request",
    "generate_request",
    "logprobs_of",
    "text_of",
    "token_counts",
]

TEXT_IN, TEXT_OUT = "text_input", "text_output"
_VLLM_SAMPLING = "sampling_parameters"
_EMBEDDING_REQUEST = "embedding_request"
_EMBEDDING_OUT = "embedding"
_ECHO = "exclude_input_in_output"
_COUNTS = ("num_input_tokens", "num_output_tokens")
_LOGPROBS = "logprobs"
_GUIDE_TYPE, _GUIDE = "guided_decoding_guide_type", "guided_decoding_guide"
_LORA_TASK, _LORA_WEIGHTS, _LORA_CONFIG = "lora_task_id", "lora_weights", "lora_config"


@dataclass(frozen=True, slots=True)
class ModelFace:
    """The inputs and outputs of one model version, as the OpenAI mapping reads them."""

    name: str
    version: str
    inputs: dict[str, tuple[str, tuple[int, ...]]]  # name -> (v2 datatype, dims incl. batch)
    outputs: frozenset[str]
    vllm: bool

    @classmethod
    def of(cls, name: str, metadata: dict[str, Any], config: dict[str, Any]) -> ModelFace:
        inputs = {
            i["name"]: (str(i["datatype"]), tuple(int(d) for d in i["shape"]))
            for i in metadata.get("inputs", [])
        }
        vllm = config.get("backend") == "vllm" or _VLLM_SAMPLING in inputs
        versions = metadata.get("versions") or [""]
        outputs = frozenset(o["name"] for o in metadata.get("outputs", []))
        return cls(name, str(versions[-1]), inputs, outputs, vllm)

    @property
    def generative(self) -> bool:
        return TEXT_IN in self.inputs and TEXT_OUT in self.outputs

    @property
    def embedding(self) -> str | None:
        """'vllm' or 'plain' when the model answers embeddings, else None."""
        if _EMBEDDING_REQUEST in self.inputs and TEXT_OUT in self.outputs:
            return "vllm"
        if TEXT_IN in self.inputs and _EMBEDDING_OUT in self.outputs:
            return "plain"
        return None

    @property
    def echoes(self) -> bool:
        """The model itself can put the prompt before its output (exclude_input_in_output)."""
        return _ECHO in self.inputs

    @property
    def logprobs(self) -> bool:
        """The model answers token log probabilities (a vLLM-style `logprobs` output)."""
        return self.vllm and _LOGPROBS in self.outputs


def generate_request(
    face: ModelFace,
    prompt: str,
    sampling: Sampling,
    *,
    stream: bool,
    echo: bool,
    logprobs: int | None = None,
    guide: Guide | None = None,
    lora: LoraRequest | None = None,
) -> InferRequest:
    """The infer request for one choice of one prompt (`logprobs`: the most likely tokens to
    report per position, None for no logprobs; `guide`: what the text must follow, None for
    nothing; `lora`: what the selected LoRA adapter sends, None for the base model)."""
    if not face.generative:
        raise OpenAIError(
            f"model '{face.name}' is not a generative model (it needs a '{TEXT_IN}' input and "
            f"a '{TEXT_OUT}' output)",
            param="model",
        )
    if logprobs is not None and not face.logprobs:
        # Triton's frontend's words first (its tests match them)
        raise OpenAIError(
            "logprobs are currently available only for the vLLM backend: model "
            f"'{face.name}' declares no '{_LOGPROBS}' output beside 'sampling_parameters'",
            param="logprobs",
        )
    max_tokens = sampling.max_tokens or DEFAULT_MAX_TOKENS
    values: dict[str, list[Any]] = {TEXT_IN: [prompt], "stream": [stream], _ECHO: [not echo]}
    if face.vllm:
        fields: dict[str, Any] = {
            "max_tokens": max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "seed": sampling.seed,
            "stop": list(sampling.stop) or None,
            "frequency_penalty": sampling.frequency_penalty,
            "presence_penalty": sampling.presence_penalty,
        }
        if logprobs is not None:
            fields["logprobs"] = logprobs
        if guide is not None:  # vllm_backend: StructuredOutputsParams(**json.loads(value))
            fields["structured_outputs"] = json.dumps(_structured_outputs(guide))
        if lora is not None:  # vllm_backend: a LoRARequest of its multi_lora.json's entry
            fields["lora_name"] = lora.name
        present = {k: v for k, v in fields.items() if v is not None}
        values[_VLLM_SAMPLING] = [json.dumps(present)]
        values["return_logprobs"] = [logprobs is not None]
    else:
        values["max_tokens"] = [max_tokens]
        for key in ("temperature", "top_p", "seed", "frequency_penalty", "presence_penalty"):
            value = getattr(sampling, key)
            if value is not None:
                values[key] = [value]
        if sampling.stop:
            values["stop_words"] = list(sampling.stop)
        if guide is not None:  # a model without these inputs gets no guide (see _request)
            # TensorRT-LLM's GuideType: JSON_SCHEMA with the schema, JSON (any object) without
            values[_GUIDE_TYPE] = ["json_schema" if guide.schema is not None else "json"]
            if guide.schema is not None:
                values[_GUIDE] = [guide.schema]
    values["return_num_input_tokens"] = [True]
    values["return_num_output_tokens"] = [True]
    request = _request(face, values)
    if lora is not None and not face.vllm:
        request.inputs += _trtllm_lora(face, lora)
    return request


def _trtllm_lora(face: ModelFace, lora: LoraRequest) -> list[InferTensor]:
    """TensorRT-LLM's adapter inputs: `lora_task_id`, and the weights and config tensors when
    given (each as its .npy file holds it, in the datatype the model declares, with a batch
    dim of 1 where the model's dims have one more)."""
    if _LORA_TASK not in face.inputs or lora.task_id is None:
        raise OpenAIError(
            f"model '{face.name}' declares no '{_LORA_TASK}' input: it takes no LoRA adapter",
            param="model",
        )
    tensors = [_tensor(face, _LORA_TASK, *face.inputs[_LORA_TASK], [lora.task_id])]
    for name, array in ((_LORA_WEIGHTS, lora.weights), (_LORA_CONFIG, lora.config)):
        if array is None or name not in face.inputs:
            continue
        datatype, dims = face.inputs[name]
        if datatype == "BYTES":
            raise OpenAIError(f"model '{face.name}' declares '{name}' as BYTES", status=500)
        data = np.asarray(array, dtype=v2_to_numpy(datatype))
        if len(dims) == data.ndim + 1:
            data = data[np.newaxis]
        tensors.append(InferTensor(name, datatype, tuple(data.shape), data))
    return tensors


def _structured_outputs(guide: Guide) -> dict[str, Any]:
    """The fields of vLLM's StructuredOutputsParams that say `guide` (the others its
    defaults): `json` = the schema text, or `json_object` = true."""
    if guide.kind is GuideKind.JSON_OBJECT:
        return {"json_object": True}
    return {"json": guide.schema}


def embedding_request(face: ModelFace, text: str, *, dimensions: int | None) -> InferRequest:
    """The infer request for one embedding input."""
    kind = face.embedding
    if kind is None:
        raise OpenAIError(
            f"model '{face.name}' is not an embedding model (it needs an '{_EMBEDDING_REQUEST}' "
            f"input, or a '{TEXT_IN}' input and an '{_EMBEDDING_OUT}' output)",
            param="model",
        )
    if kind == "plain":
        if dimensions is not None:
            raise OpenAIError(f"model '{face.name}' does not take 'dimensions'", param="dimensions")
        return _request(face, {TEXT_IN: [text]})
    pooling = {"dimensions": [dimensions]} if dimensions is not None else {}
    doc = json.dumps({"input": text, "pooling_params": pooling})
    values: dict[str, list[Any]] = {
        _EMBEDDING_REQUEST: [doc],
        "return_num_input_tokens": [True],
        "return_num_output_tokens": [True],
    }
    return _request(face, values)


def _request(face: ModelFace, values: dict[str, list[Any]]) -> InferRequest:
    """An infer request of the values whose inputs the model declares."""
    tensors = [
        _tensor(face, name, *face.inputs[name], items)
        for name, items in values.items()
        if name in face.inputs
    ]
    return InferRequest(model_name=face.name, model_version="", inputs=tensors)


def _tensor(
    face: ModelFace, name: str, datatype: str, dims: tuple[int, ...], items: list[Any]
) -> InferTensor:
    shape = _shape(dims, len(items))
    if shape is None:
        raise OpenAIError(
            f"model '{face.name}' declares input '{name}' with dims {list(dims)}, which cannot "
            f"hold {len(items)} value(s)",
            status=500,
        )
    if datatype == "BYTES":
        data = np.empty(len(items), dtype=np.object_)
        data[:] = [str(v).encode("utf-8") for v in items]
    elif datatype == "BOOL":
        data = np.array([bool(v) for v in items], dtype=np.bool_)
    else:
        dtype = v2_to_numpy(datatype)
        if np.issubdtype(dtype, np.unsignedinteger):
            items = [int(v) % (1 << (8 * dtype.itemsize)) for v in items]
        try:
            data = np.array(items, dtype=dtype)
        except (OverflowError, ValueError):
            raise OpenAIError(f"a value for input '{name}' does not fit {datatype}") from None
    return InferTensor(name, datatype, shape, data.reshape(shape))


def _shape(dims: tuple[int, ...], count: int) -> tuple[int, ...] | None:
    """`dims` with the innermost variable dim taking `count` and the others 1; None when the
    fixed dims cannot hold `count` values."""
    shape = list(dims) or [count]
    variable = [i for i, d in enumerate(shape) if d < 0]
    for i in variable:
        shape[i] = 1
    if variable:
        shape[variable[-1]] = count // max(math.prod(shape), 1) if math.prod(shape) else 0
    return tuple(shape) if math.prod(shape) == count else None


def text_of(response: InferResponse) -> str:
    """The text a response carries (its `text_output` elements, joined); '' if none."""
    for tensor in response.outputs:
        if tensor.name == TEXT_OUT:
            return "".join(_strings(tensor))
    return ""


def token_counts(response: InferResponse) -> tuple[int, int] | None:
    """(prompt tokens, generated tokens) when the model reports them."""
    found = {t.name: t for t in response.outputs if t.name in _COUNTS}
    if len(found) != len(_COUNTS):
        return None
    prompt, generated = (int(np.asarray(found[n].data).reshape(-1)[0]) for n in _COUNTS)
    return prompt, generated


def logprobs_of(response: InferResponse, *, top: int) -> list[TokenLogprob]:
    """The generated tokens' log probabilities a response carries ([] when none), keeping the
    `top` most likely tokens per position."""
    for tensor in response.outputs:
        if tensor.name == _LOGPROBS:
            return [
                token
                for raw in _strings(tensor)
                for token in parse_logprobs(response.model_name, raw, top=top)
            ]
    return []


def embedding_of(response: InferResponse) -> list[float]:
    """The vector an embedding model answered (either convention)."""
    for tensor in response.outputs:
        if tensor.name == _EMBEDDING_OUT:
            return [float(x) for x in np.asarray(tensor.data, dtype=np.float64).reshape(-1)]
    try:
        vector = json.loads(text_of(response))
    except ValueError:
        vector = None
    if not isinstance(vector, list) or not all(isinstance(x, int | float) for x in vector):
        raise OpenAIError(f"model '{response.model_name}' answered no embedding vector", status=500)
    return [float(x) for x in vector]


def _strings(tensor: InferTensor) -> list[str]:
    return [
        item.decode("utf-8", errors="replace") if isinstance(item, bytes) else str(item)
        for item in np.asarray(tensor.data).reshape(-1)
    ]
