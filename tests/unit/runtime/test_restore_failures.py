"""A failed snapshot restore: the snapshotter's own errors cost a file load, bugs fail the load.

Both are counted in `thaw_restore_failures_total{model,reason}`, so neither can hide as a
slower cold start.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import numpy as np
import pytest

from runtime.config import ServeConfig
from runtime.inference import InferRequest, InferTensor
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from tests.fixtures.models import make_add_sub
from tests.fixtures.onnx_models import make_onnx_add

snapshotter = pytest.importorskip("snapshotter")


class _FailingImages:
    """An image source with behaviour: every model has an image, and restoring it raises."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.restores: list[str] = []

    def source_digest(self, version_dir: Path) -> str:
        return "0" * 64

    def find(self, model: str, version: str, source_digest: str | None) -> object:
        return snapshotter.ImageRef(model, version, "cpu")

    def restore(self, ref: object, arena: object = None) -> object:
        self.restores.append(str(ref))
        raise self.error


def _failures(metrics: Metrics, model: str) -> dict[str, float]:
    text = metrics.exposition().decode()
    pattern = rf'^thaw_restore_failures_total{{model="{model}",reason="(\w+)"}} (\S+)$'
    return {reason: float(value) for reason, value in re.findall(pattern, text, re.M)}


async def _add(manager: ModelManager) -> np.ndarray:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    response = await manager.infer(
        InferRequest("onnx_add", "", [InferTensor("INPUT0", "FP32", (2, 4), x)])
    )
    return response.outputs[0].data - x  # the model's weight, broadcast


@pytest.mark.parametrize(
    "error",
    [
        snapshotter.IntegrityError("chunk ab does not match its digest", digest="ab"),
        snapshotter.StoreTimeout("store did not answer within 5 s"),
        PermissionError(13, "Permission denied", "/cache/chunks/ab"),
    ],
    ids=lambda e: type(e).__name__,
)
async def test_a_snapshot_error_loads_the_files_and_is_counted(
    tmp_path: Path, error: BaseException
) -> None:
    make_onnx_add(tmp_path)
    images = _FailingImages(error)
    metrics = Metrics()
    manager = ModelManager(ServeConfig(repository=tmp_path), metrics=metrics, image_loader=images)
    await manager.start()
    try:
        assert manager.is_ready(), await manager.index()
        assert images.restores == ["onnx_add:1 (cpu)"]
        assert (await _add(manager)).shape == (2, 4)  # served from the model file
        assert _failures(metrics, "onnx_add") == {type(error).__name__: 1.0}
        text = metrics.exposition().decode()
        assert 'thaw_model_restored_from_snapshot{model="onnx_add",version="1"} 0\n' in text
    finally:
        await manager.stop()


async def test_a_bug_in_restore_fails_the_load_instead_of_loading_the_files(
    tmp_path: Path,
) -> None:
    make_onnx_add(tmp_path)
    make_add_sub(tmp_path)  # a python model: never restored, unaffected
    images = _FailingImages(KeyError("arena_bytes"))
    metrics = Metrics()
    manager = ModelManager(ServeConfig(repository=tmp_path), metrics=metrics, image_loader=images)
    await manager.start()  # the server comes up; the broken load is recorded, not raised
    try:
        rows = {row["name"]: row for row in await manager.index()}
        assert rows["onnx_add"]["state"] == "UNAVAILABLE"
        assert "snapshot restore failed: KeyError('arena_bytes')" in rows["onnx_add"]["reason"]
        assert rows["add_sub"]["state"] == "READY"
        assert _failures(metrics, "onnx_add") == {"KeyError": 1.0}
        text = metrics.exposition().decode()
        assert 'thaw_model_load_failures_total{model="onnx_add"} 1\n' in text
    finally:
        await manager.stop()


async def test_a_corrupt_image_on_disk_is_counted_as_an_integrity_failure(
    tmp_path: Path,
) -> None:
    repo, store = tmp_path / "repo", tmp_path / "store"
    repo.mkdir()
    make_onnx_add(repo)
    await asyncio.to_thread(  # a build reads and hashes files: off the loop, as in the product
        snapshotter.build_image, repo / "onnx_add" / "1", snapshotter.open_store(str(store))
    )
    for chunk in store.rglob("*"):
        if chunk.is_file() and "manifest" not in chunk.name and chunk.stat().st_size > 8:
            chunk.write_bytes(b"\x00" * chunk.stat().st_size)  # same size, wrong digest
    metrics = Metrics()
    manager = ModelManager(ServeConfig(repository=repo, store=str(store)), metrics=metrics)
    await manager.start()
    try:
        assert manager.is_ready(), await manager.index()
        assert _failures(metrics, "onnx_add") == {"IntegrityError": 1.0}
    finally:
        await manager.stop()
