"""The Triton Python model that serves benchmarks/tiny_gpt.py, decoupled: one response per token.

Copied as `model.py` into a version folder beside `tiny_gpt.py`, `config.json` and
`model.safetensors` (benchmarks/openai_ttft.py builds it). Inputs in the TRT-LLM/Python style
of Triton's OpenAI frontend: text_input, stream, max_tokens, temperature, seed; outputs
text_output, num_input_tokens, num_output_tokens. The config parameter `threads` sets torch's
intra-op threads (the direct script gets the same number).
"""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Any

import numpy as np
import torch
import triton_python_backend_utils as pb_utils


def _scalar(request: pb_utils.InferenceRequest, name: str, default: object) -> Any:
    """The input's first element (its numpy type, or bytes for a string), or `default`."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


def _response(text: str, prompt_tokens: int, tokens: int) -> pb_utils.InferenceResponse:
    return pb_utils.InferenceResponse(
        [
            pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_)),
            pb_utils.Tensor("num_input_tokens", np.array([prompt_tokens], dtype=np.int32)),
            pb_utils.Tensor("num_output_tokens", np.array([tokens], dtype=np.int32)),
        ]
    )


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        threads = config.get("parameters", {}).get("threads", {}).get("string_value", "1")
        torch.set_num_threads(int(threads))
        folder = os.path.join(args["model_repository"], args["model_version"])
        path = os.path.join(folder, "tiny_gpt.py")
        spec = importlib.util.spec_from_file_location("tiny_gpt", path)
        if spec is None or spec.loader is None:
            raise RuntimeError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        self.lm = module.TinyLM.load(folder)

    def execute(self, requests: list[pb_utils.InferenceRequest]) -> None:
        for request in requests:
            prompt = _scalar(request, "text_input", b"").decode("utf-8", errors="replace")
            stream = bool(_scalar(request, "stream", False))
            max_tokens = int(_scalar(request, "max_tokens", 16))
            temperature = float(_scalar(request, "temperature", 0.0))
            seed = int(_scalar(request, "seed", 0))
            sender = request.get_response_sender()
            prompt_tokens = len(self.lm.prompt_tokens(prompt))
            pieces = self.lm.stream(
                prompt, max_tokens=max_tokens, temperature=temperature, seed=seed
            )
            if stream:
                for piece in pieces:
                    if sender.is_cancelled():
                        break
                    sender.send(_response(piece, prompt_tokens, 1))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                text = list(pieces)
                sender.send(
                    _response("".join(text), prompt_tokens, len(text)),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
        return None
