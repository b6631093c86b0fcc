"""KServe `ModelServer` serving a Triton repository's ONNX and Python models (in its own venv).

    python kserve_app.py MANIFEST.json --http_port P --enable_grpc false

MANIFEST lists the models (name, kind, version_dir, config_json), written by `peers.KServePeer`
from the repository with Triton's own config schema. ONNX models run in an onnxruntime session
created from the same `model.onnx`; Python models run the same Triton `model.py`, through a
small in-process stand-in for `triton_python_backend_utils`. KServe binds 0.0.0.0: start it
only inside a private network namespace.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import kserve
import numpy as np
from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse
from kserve.utils.numpy_codec import from_np_dtype
from triton_model_shim import TritonModelRunner


def _response(request: InferRequest, name: str, outputs: dict[str, np.ndarray]) -> InferResponse:
    infer_outputs = []
    for out_name, array in outputs.items():
        output = InferOutput(
            name=out_name, shape=list(array.shape), datatype=from_np_dtype(array.dtype)
        )
        output.set_data_from_numpy(array, binary_data=False)
        infer_outputs.append(output)
    return InferResponse(response_id=request.id or "", model_name=name, infer_outputs=infer_outputs)


class OnnxModel(kserve.Model):
    """One onnxruntime session over the repository's model.onnx."""

    def __init__(self, name: str, model_file: Path) -> None:
        super().__init__(name)
        self.model_file = model_file
        self.load()

    def load(self) -> bool:
        import onnxruntime as ort

        self.session = ort.InferenceSession(
            str(self.model_file), providers=["CPUExecutionProvider"]
        )
        self.ready = True
        return self.ready

    def predict(
        self, payload: InferRequest, headers: Any = None, response_headers: Any = None
    ) -> InferResponse:
        feeds = {inp.name: inp.as_numpy() for inp in payload.inputs}
        names = [o.name for o in self.session.get_outputs()]
        results = self.session.run(names, feeds)
        return _response(payload, self.name, dict(zip(names, results, strict=True)))


class PythonModel(kserve.Model):
    """The repository's Triton `model.py`, one request per `execute` call."""

    def __init__(self, name: str, version_dir: Path, config_json: str) -> None:
        super().__init__(name)
        self.runner = TritonModelRunner(name, version_dir, config_json)
        self.ready = True

    def predict(
        self, payload: InferRequest, headers: Any = None, response_headers: Any = None
    ) -> InferResponse:
        try:
            outputs = self.runner.run({inp.name: inp.as_numpy() for inp in payload.inputs})
        except ValueError as exc:
            raise kserve.errors.InvalidInput(str(exc)) from exc
        return _response(payload, self.name, outputs)


def main() -> None:
    manifest = json.loads(Path(sys.argv[1]).read_text())
    models: list[kserve.Model] = []
    for entry in manifest:
        version_dir = Path(entry["version_dir"])
        if entry["kind"] == "onnxruntime":
            models.append(OnnxModel(entry["name"], version_dir / "model.onnx"))
        else:
            models.append(PythonModel(entry["name"], version_dir, entry["config_json"]))
    kserve.ModelServer().start(models)


if __name__ == "__main__":
    main()
