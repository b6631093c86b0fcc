"""The runtime: `thaw serve`, a Triton-compatible model server (one replica of a model).

Subpackages from the top layer down (each imports only those below it, `pyproject.toml`'s
import-linter contract), then the root modules every layer reads:

    process/        the serving process: `thaw serve`'s flags, server, fork server (zygote)
    http/           the KServe v2 REST surface: THE route table and thin handlers
    grpc/           Triton's `GRPCInferenceService` surface: listener, handlers, streams
    openai/         the OpenAI-compatible `/v1` routes (completions, chat, embeddings, models)
    models/         the models: ModelManager, versions loading, repository, response cache
    scheduling/     how a model version's requests run: batching, sequences, ensembles
    python/         Triton's Python models (`model.py`): pb_utils, hosts, stub processes
    backends/       the framework backends behind one Protocol (onnxruntime, torch, TensorRT)
    direct/         connections `thaw up` hands over, and the way back to its front door
    devices/        what the machine offers and where each instance runs (pure plans)
    observe/        Prometheus metrics with Triton's names, statistics, custom metrics
    codecs/         wire formats <-> the inference value types (REST, protobuf, generate)
    config          ServeConfig: every setting of one `thaw serve`, built once and validated
    errors          the error tree; every error that reaches a client carries its status
    inference       the inference value types: InferRequest, InferResponse, InferTensor
    datatypes       v2 datatypes: names, numpy dtypes, element sizes, BYTES (de)serialization
    header_forward  tritonserver's header-forward patterns: headers that become parameters
    model_config    `tritonconfig`'s functions, raising the runtime's RepositoryError

Exports `ServeConfig`, `ServingError`, `ModelManager` and `main` (`thaw serve`'s command line),
each imported on first use: a Python model's stub process imports `runtime.python` under an
interpreter that may hold only numpy, so importing this package must import nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.config import ServeConfig
    from runtime.errors import ServingError
    from runtime.models.manager import ModelManager
    from runtime.process.cli import main

__all__ = ["ModelManager", "ServeConfig", "ServingError", "main"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "ModelManager": "runtime.models.manager",
    "ServeConfig": "runtime.config",
    "ServingError": "runtime.errors",
    "main": "runtime.process.cli",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
