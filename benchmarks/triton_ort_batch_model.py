"""Triton python_backend `model.py` that runs an ONNX model on onnxruntime, a batch per call.

The pip-installable Triton (nvidia-pytriton) has no onnxruntime backend, so the batching
benchmark serves resnet50 to Triton through its python backend with this file: Triton's own
dynamic batcher forms the batch, `execute` receives its requests, concatenates their inputs
into one `InferenceSession.run` and splits the output back per request, as a framework backend
does. The session uses as many intra-op threads as `thaw serve` gives one instance (the cores).
Runs inside Triton's Python stub (numpy, onnxruntime and `triton_python_backend_utils`).
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = os.cpu_count() or 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> list[pb_utils.InferenceResponse]:
        arrays = [
            pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
            for request in requests
        ]
        batch = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
        [output] = self.session.run([self.output_name], {self.input_name: batch})
        responses, offset = [], 0
        for array in arrays:
            rows = array.shape[0]
            tensor = pb_utils.Tensor(self.output_name, output[offset : offset + rows])
            responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
            offset += rows
        return responses
