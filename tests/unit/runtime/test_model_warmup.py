"""Warm-up samples from `model_warmup`: data kinds, batch sizes, counts, refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from runtime.backends.base import ExecTimings
from runtime.errors import RepositoryError, ServingError
from runtime.inference import InferRequest, InferResponse
from runtime.models.warmup import run_warmup, warmup_samples
from tritonconfig import parse_config


def _config(warmup: str, *, max_batch_size: int = 4) -> object:
    return parse_config(
        f'name: "m" backend: "python" max_batch_size: {max_batch_size} '
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] }, '
        '{ name: "S" data_type: TYPE_STRING dims: [ 1 ] } ] '
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ] '
        f"model_warmup [ {warmup} ]",
        "test",
    )


SAMPLE = (
    '{ name: "w" batch_size: 3 count: 2 inputs [ '
    '{ key: "X" value: { data_type: TYPE_FP32 dims: [ 2 ] random_data: true } }, '
    '{ key: "S" value: { data_type: TYPE_STRING dims: [ 1 ] random_data: true } } ] }'
)


def test_a_sample_is_batch_size_requests_run_count_times(tmp_path: Path) -> None:
    [sample] = warmup_samples(_config(SAMPLE), tmp_path)  # type: ignore[arg-type]
    assert sample.count == 2 and len(sample.requests) == 3
    tensors = {t.name: t for t in sample.requests[0].inputs}
    assert tensors["X"].shape == (1, 2) and tensors["X"].data.dtype == np.float32
    assert tensors["S"].data.reshape(-1).tolist() == [b""]  # strings: zeros, as in Triton


class _Recorder:
    gil_bound = True
    used_image = False
    execute_async = None

    def __init__(self, fail: bool = False) -> None:
        self.timings = ExecTimings()
        self.batches: list[int] = []
        self.fail = fail

    def load(self, ctx: object) -> None: ...

    def unload(self) -> None: ...

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        self.batches.append(len(requests))
        if self.fail:
            return [ServingError("bad warm-up input") for _ in requests]
        return [InferResponse("m", "1", []) for _ in requests]


def test_every_instance_runs_every_sample_and_a_failure_fails_the_load(tmp_path: Path) -> None:
    samples = warmup_samples(_config(SAMPLE), tmp_path)  # type: ignore[arg-type]
    instances = [_Recorder(), _Recorder()]
    assert run_warmup("m", instances, samples) >= 0  # type: ignore[arg-type]
    assert [i.batches for i in instances] == [[3, 3], [3, 3]]
    with pytest.raises(RepositoryError, match="failed to run warmup sample 'w': bad warm-up"):
        run_warmup("m", [_Recorder(fail=True)], samples)  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("sample", "max_batch_size", "fragment"),
    [
        ('{ name: "w" batch_size: 0 }', 4, "batch_size = 0, must be >= 1"),
        ('{ name: "w" batch_size: 5 }', 4, "must be <= max_batch_size 4"),
        ('{ name: "w" batch_size: 2 }', 0, "a model without batching needs batch_size 1"),
        (
            '{ name: "w" batch_size: 1 inputs { key: "X" value: { data_type: TYPE_FP32 '
            'dims: [ 2 ] input_data_file: "../../etc/passwd" } } }',
            4,
            "is outside",
        ),
        (
            '{ name: "w" batch_size: 1 inputs { key: "X" value: { data_type: TYPE_FP32 '
            'dims: [ 2 ] input_data_file: "missing" } } }',
            4,
            "cannot read",
        ),
    ],
)
def test_samples_that_cannot_be_built_are_refused(
    tmp_path: Path, sample: str, max_batch_size: int, fragment: str
) -> None:
    with pytest.raises(RepositoryError) as raised:
        warmup_samples(_config(sample, max_batch_size=max_batch_size), tmp_path)  # type: ignore[arg-type]
    assert fragment in raised.value.message
