"""A reload that changes only a model's instance groups updates its instances in place, as
Triton's does (qa/L0_model_update's instance_update_test.py): the unchanged instances stay (no
`finalize`, no second `initialize`), only the added ones initialize, only the removed ones
finalize, and a request running on a removed instance still gets its answer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from runtime.config import ModelControlMode, ServeConfig
from runtime.errors import ServingError
from runtime.inference import InferRequest, InferTensor
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from tests.fixtures.models import python_model, wait_begun, write_config

_COUNTING_PY = """
import os
import time

import triton_python_backend_utils as pb_utils

# Beside the repository, as MODEL_LOG_DIR in Triton's test: a file in the model's directory
# would be a change of the model's files.
_DIR = os.path.realpath(__file__)
for _ in range(4):  # <dir>/repo/counted/1/model.py
    _DIR = os.path.dirname(_DIR)


def _log(kind):
    with open(os.path.join(_DIR, kind), "a") as f:
        f.write("x\\n")


class TritonPythonModel:
    def initialize(self, args):
        _log("initialize")

    def execute(self, requests):
        _log("started")
        delay = os.path.join(_DIR, "delay")
        if os.path.exists(delay):
            time.sleep(float(open(delay).read()))
        responses = []
        for r in requests:
            data = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses

    def finalize(self):
        _log("finalize")
"""


def _config(groups: str, *, batch: int = 0) -> str:
    return f"""
    name: "counted"
    backend: "python"
    max_batch_size: {batch}
    input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
    output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
    instance_group [ {groups} ]
    """


def _cpu(count: int, extra: str = "") -> str:
    return f"{{ count: {count} kind: KIND_CPU {extra} }}"


def _count(model_dir: Path, kind: str) -> int:
    path = model_dir.parent.parent / kind
    return len(path.read_text().split()) if path.exists() else 0


def _request(batched: bool = False) -> InferRequest:
    shape = (1, 2) if batched else (2,)
    data = np.ones(shape, dtype=np.float32)
    return InferRequest("counted", "", [InferTensor("INPUT0", "FP32", shape, data)])


@pytest.fixture
async def served(tmp_path: Path):  # type: ignore[no-untyped-def]
    model_dir = python_model(tmp_path / "repo", "counted", _config(_cpu(3)), _COUNTING_PY)
    manager = ModelManager(
        ServeConfig(repository=tmp_path / "repo", model_control_mode=ModelControlMode.EXPLICIT),
        metrics=Metrics(),
    )
    await manager.start()
    try:
        yield manager, model_dir
    finally:
        await manager.stop()


async def _reload(manager: ModelManager, model_dir: Path, config: str) -> tuple[int, int]:
    """Write `config`, load, serve one request; (initialize, finalize) counts after the load."""
    write_config(model_dir, config)
    await manager.load("counted")
    counts = _count(model_dir, "initialize"), _count(model_dir, "finalize")
    batched = "max_batch_size: 0" not in config
    assert (await manager.infer(_request(batched))).outputs[0].name == "OUTPUT0"
    return counts


async def test_changing_the_count_adds_and_removes_only_the_difference(served) -> None:  # type: ignore[no-untyped-def]
    manager, model_dir = served
    assert await _reload(manager, model_dir, _config(_cpu(3))) == (3, 0)
    assert await _reload(manager, model_dir, _config(_cpu(4))) == (4, 0)
    assert await _reload(manager, model_dir, _config(_cpu(1))) == (4, 3)
    # Split into two named groups of the same kind: the same instances.
    split = _config('{ name: "a" count: 1 kind: KIND_CPU }, { name: "b" count: 1 kind: KIND_CPU }')
    assert await _reload(manager, model_dir, split) == (5, 3)
    await manager.unload("counted")
    assert _count(model_dir, "finalize") == 5


async def test_a_changed_rate_limiter_is_a_new_instance(served) -> None:  # type: ignore[no-untyped-def]
    manager, model_dir = served
    needs = 'rate_limiter { resources [ { name: "R1" count: 2 } ] }'
    assert await _reload(manager, model_dir, _config(_cpu(1, needs))) == (1, 0)
    more = needs.replace("count: 2", "count: 8")
    assert await _reload(manager, model_dir, _config(_cpu(1, more))) == (2, 1)


async def test_a_change_beyond_the_instance_groups_reloads_every_instance(served) -> None:  # type: ignore[no-untyped-def]
    manager, model_dir = served
    assert await _reload(manager, model_dir, _config(_cpu(2))) == (2, 0)
    assert await _reload(manager, model_dir, _config(_cpu(2), batch=2)) == (4, 2)


async def test_a_request_on_a_removed_instance_is_answered_and_the_update_does_not_wait_for_it(
    served,  # type: ignore[no-untyped-def]
) -> None:
    manager, model_dir = served
    await _reload(manager, model_dir, _config(_cpu(1)))
    (model_dir.parent.parent / "delay").write_text("2")
    running = asyncio.ensure_future(manager.infer(_request()))
    await asyncio.to_thread(wait_begun, model_dir.parent.parent, 1)
    # Adding an instance does not wait for the request the kept one runs.
    write_config(model_dir, _config(_cpu(2)))
    await asyncio.wait_for(manager.load("counted"), 1.5)
    assert not running.done() and _count(model_dir, "finalize") == 0
    assert (await running).outputs[0].name == "OUTPUT0"
    (model_dir.parent.parent / "delay").unlink()
    assert (_count(model_dir, "initialize"), _count(model_dir, "finalize")) == (2, 0)


async def test_a_refused_config_keeps_the_instances_serving(served) -> None:  # type: ignore[no-untyped-def]
    manager, model_dir = served
    await _reload(manager, model_dir, _config(_cpu(2)))
    (model_dir / "config.pbtxt").write_text("--- invalid config ---")
    with pytest.raises(ServingError):
        await manager.load("counted")
    assert await _reload(manager, model_dir, _config(_cpu(1))) == (2, 1)


def _in_sequence(sequence: int, **flags: bool) -> InferRequest:
    data = np.ones((2,), dtype=np.float32)
    tensor = InferTensor("INPUT0", "FP32", (2,), data)
    return InferRequest("counted", "", [tensor], parameters={"sequence_id": sequence, **flags})


async def test_a_sequence_batcher_with_no_live_sequence_updates_in_place(served) -> None:  # type: ignore[no-untyped-def]
    manager, model_dir = served
    batcher = "sequence_batching { direct { } max_sequence_idle_microseconds: 8000000 }"
    write_config(model_dir, _config(_cpu(2)) + batcher)
    await manager.load("counted")
    await manager.infer(_in_sequence(1, sequence_start=True))
    await manager.infer(_in_sequence(1, sequence_end=True))
    for count, expected in ((4, (4, 0)), (3, (4, 1))):
        write_config(model_dir, _config(_cpu(count)) + batcher)
        await manager.load("counted")
        assert (_count(model_dir, "initialize"), _count(model_dir, "finalize")) == expected
        await manager.infer(_in_sequence(1, sequence_start=True))
        await manager.infer(_in_sequence(1, sequence_end=True))
    # A live sequence keeps its instance: the version reloads whole (Triton would keep the
    # removed instance until the sequence ends).
    await manager.infer(_in_sequence(2, sequence_start=True))
    write_config(model_dir, _config(_cpu(2)) + batcher)
    await manager.load("counted")
    assert (_count(model_dir, "initialize"), _count(model_dir, "finalize")) == (6, 4)
