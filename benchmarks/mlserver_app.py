"""MLServer custom runtime that runs a Triton python_backend `model.py` (in `.bench/mlserver-venv`).

`peers.MLServerPeer` writes MLServer's `settings.json` and one `model-settings.json` per model
whose `implementation` is `mlserver_app.TritonPythonRuntime`, `parameters.uri` the model's
version folder and `parameters.extra.config_json` its Triton config as JSON.
"""

from __future__ import annotations

from pathlib import Path

from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.errors import InferenceError
from mlserver.types import InferenceRequest, InferenceResponse
from triton_model_shim import TritonModelRunner


class TritonPythonRuntime(MLModel):
    """One request per `execute` call, on MLServer's event loop (`parallel_workers: 0`)."""

    async def load(self) -> bool:
        params = self.settings.parameters
        if params is None or params.uri is None:
            raise InferenceError(f"model {self.name}: parameters.uri is required")
        extra = params.extra or {}
        self.runner = TritonModelRunner(self.name, Path(params.uri), extra["config_json"])
        self.ready = True
        return self.ready

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        inputs = {inp.name: NumpyCodec.decode_input(inp) for inp in payload.inputs}
        try:
            outputs = self.runner.run(inputs)
        except ValueError as exc:
            raise InferenceError(str(exc)) from exc
        encoded = []
        for name, array in outputs.items():
            output = NumpyCodec.encode_output(name, array)
            output.shape = list(array.shape)  # NumpyCodec makes 1-D arrays [N, 1]; keep Triton's
            encoded.append(output)
        return InferenceResponse(model_name=self.name, outputs=encoded)
