"""Triton's model warm-up: the config's `model_warmup` samples run on every instance at load.

    samples(config, model_dir) -> [WarmupSample(name, requests, count)]
    run_warmup(instances, samples) -> seconds

A sample names each input's datatype and dims (no batch dimension, no -1) and its data:
`zero_data`, `random_data` (zeros for BYTES, as in Triton) or `input_data_file`, raw row-major
bytes of `<model>/warmup/<file>` (BYTES elements length-prefixed). `batch_size` requests of the
sample execute together, `count` times (0 means once), on each instance, before the version
is reported ready, so the first real request pays for no lazy initialisation. A sample that
cannot be built or fails to run fails the load, with Triton's words where it has them.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runtime.backends.base import Backend
from runtime.datatypes import config_to_v2, from_wire, v2_to_numpy
from runtime.errors import InvalidInput, RepositoryError, ServingError
from runtime.inference import InferRequest, InferTensor
from tritonconfig.schema import mc

__all__ = ["WarmupSample", "run_warmup", "warmup_samples"]

logger = logging.getLogger(__name__)

# A sample's tensors are held in memory while the load runs: bound them.
_MAX_SAMPLE_BYTES = 1 << 30


@dataclass(frozen=True)
class WarmupSample:
    name: str
    requests: list[InferRequest]
    count: int


def warmup_samples(config: mc.ModelConfig, model_dir: Path) -> list[WarmupSample]:
    """The config's warm-up samples as requests; RepositoryError for one that cannot be made."""
    samples = []
    rng = np.random.default_rng(0)
    for warmup in config.model_warmup:
        label = f"model '{config.name}' warmup sample '{warmup.name}'"
        batch = warmup.batch_size
        if batch < 1:
            raise RepositoryError(f"{label}: batch_size = {batch}, must be >= 1")
        if config.max_batch_size == 0 and batch != 1:
            raise RepositoryError(f"{label}: a model without batching needs batch_size 1")
        if config.max_batch_size and batch > config.max_batch_size:
            raise RepositoryError(
                f"{label}: batch_size = {batch}, must be <= max_batch_size {config.max_batch_size}"
            )
        tensors = [
            _tensor(name, spec, config.max_batch_size > 0, model_dir, rng, label)
            for name, spec in sorted(warmup.inputs.items())
        ]
        requests = [
            InferRequest(config.name, "", [_copy(t) for t in tensors], id=f"warmup:{warmup.name}")
            for _ in range(batch)
        ]
        samples.append(WarmupSample(warmup.name, requests, max(1, warmup.count)))
    return samples


def first_contact_sample(config: mc.ModelConfig) -> WarmupSample | None:
    """One request of zeros shaped by the config (batch 1, variable dims 1), run on a GPU
    instance at load when the config has no `model_warmup` of its own: the first inference on
    a GPU creates cuDNN/cuBLAS handles, grows the framework's device arena and picks
    convolution algorithms, and that belongs before the replica reports ready, not in the
    first request's latency. None when an input has no sample form (strings)."""
    tensors = []
    for spec in config.input:
        datatype = config_to_v2(mc.DataType.Name(spec.data_type))
        if datatype == "BYTES":
            return None
        dims = tuple(d if d > 0 else 1 for d in spec.dims)
        shape = ((1,) if config.max_batch_size > 0 else ()) + dims
        data = np.zeros(shape, dtype=v2_to_numpy(datatype))
        tensors.append(InferTensor(spec.name, datatype, shape, data))
    request = InferRequest(config.name, "", tensors, id="warmup:first-contact")
    return WarmupSample("first-contact", [request], 1)


def run_warmup(model: str, instances: list[Backend], samples: list[WarmupSample]) -> float:
    """Run every sample on every instance (blocking: the loader's thread); seconds taken."""
    start = time.perf_counter()
    for index, instance in enumerate(instances):
        for sample in samples:
            for iteration in range(1, sample.count + 1):
                # Triton's verbose line, word for word (qa/L0_warmup greps it).
                logger.debug(
                    "model '%s' instance %d is running warmup sample '%s' for iteration %d",
                    model, index, sample.name, iteration,
                )  # fmt: skip
                _run(model, index, instance, sample)
    return time.perf_counter() - start


def _run(model: str, index: int, instance: Backend, sample: WarmupSample) -> None:
    try:
        results = instance.execute(sample.requests)
    except Exception as exc:  # a model's own failure, whatever its type: the load fails
        raise RepositoryError(
            f"model '{model}' instance {index}: failed to run warmup sample '{sample.name}': "
            f"{exc!r}"
        ) from exc
    errors = [r.message for r in results if isinstance(r, ServingError)]
    if errors:
        # Each response's error ends with ';', as in Triton's text (qa/L0_warmup greps it).
        raise RepositoryError(
            f"model '{model}' instance {index}: failed to run warmup sample "
            f"'{sample.name}': {' '.join(f'{e};' for e in errors)}"
        )


def _tensor(
    name: str,
    spec: mc.ModelWarmup.Input,
    batched: bool,
    model_dir: Path,
    rng: np.random.Generator,
    label: str,
) -> InferTensor:
    dims = tuple(int(d) for d in spec.dims)
    if any(d < 0 for d in dims):
        raise RepositoryError(
            f"{label}: warmup setting expects all variable-size dimensions are specified for "
            f"input '{name}'"
        )
    if spec.data_type == mc.TYPE_INVALID:
        raise RepositoryError(f"{label}: input '{name}' needs a data_type")
    datatype = config_to_v2(mc.DataType.Name(spec.data_type))
    count = math.prod(dims)
    kind = spec.WhichOneof("input_data_type")
    if kind == "input_data_file":
        data = _from_file(name, datatype, dims, model_dir, spec.input_data_file, label)
    elif datatype == "BYTES":  # random data falls back to zeros (empty strings), as in Triton
        data = np.empty(dims, dtype=np.object_)
        data.fill(b"")
    else:
        dtype = v2_to_numpy(datatype)
        if count * np.dtype(dtype).itemsize > _MAX_SAMPLE_BYTES:
            raise RepositoryError(f"{label}: input '{name}' is over {_MAX_SAMPLE_BYTES} bytes")
        if kind != "random_data":
            data = np.zeros(dims, dtype=dtype)
        elif np.dtype(dtype).kind == "f":
            data = rng.random(dims).astype(dtype)
        else:  # integers and BOOL: 0 or 1, valid for any of them
            data = rng.integers(0, 2, size=dims).astype(dtype)
    shape = ((1,) if batched else ()) + dims
    return InferTensor(name, datatype, shape, data.reshape(shape))


def _from_file(
    name: str, datatype: str, dims: tuple[int, ...], model_dir: Path, file: str, label: str
) -> np.ndarray:
    root = (model_dir / "warmup").resolve()
    path = (root / file).resolve()
    if root not in path.parents:
        raise RepositoryError(f"{label}: input_data_file '{file}' is outside {root}")
    try:
        if path.stat().st_size > _MAX_SAMPLE_BYTES:
            raise RepositoryError(f"{label}: {path} is over {_MAX_SAMPLE_BYTES} bytes")
        raw = path.read_bytes()
    except OSError as exc:
        raise RepositoryError(f"{label}: cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return np.array(from_wire(raw, name, datatype, dims))
    except InvalidInput as exc:
        raise RepositoryError(f"{label}: {path}: {exc.message}") from exc


def _copy(tensor: InferTensor) -> InferTensor:
    return InferTensor(tensor.name, tensor.datatype, tensor.shape, tensor.data)
