"""`thaw serve --cache` over hostile snapshot images: the model loads its files instead.

A manifest in the node cache that lies about its sizes or is not a file at all must cost a
classic load (the image is skipped or its restore fails with a SnapshotError), never a failed
load, a hang or a server that stops answering others.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from snapshotter import build_image, open_store
from snapshotter.image_ref import ImageRef
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

SIZE = 4096


def _lie_artifact_terabyte(manifest: Path) -> None:
    doc = json.loads(manifest.read_bytes())
    doc["artifacts"] = {"onnx_graph": {"digest": "e" * 64, "size": 1 << 40}}
    manifest.write_bytes(json.dumps(doc).encode())


def _fifo(manifest: Path) -> None:
    manifest.unlink()
    os.mkfifo(manifest)


@pytest.mark.parametrize("damage", [_lie_artifact_terabyte, _fifo], ids=["1tb_artifact", "fifo"])
def test_a_hostile_image_costs_a_file_load_not_the_model(
    tmp_path: Path, start_serve: Callable[..., ServeProcess], damage: Callable[[Path], None]
) -> None:
    repo, cache = tmp_path / "repo", tmp_path / "cache"
    make_onnx_add(repo, size=SIZE)
    build_image(repo / "onnx_add" / "1", open_store(str(cache)))
    damage(cache / ImageRef("onnx_add", "1", "cpu").key / "manifest.json")
    server = start_serve(repo, "--model-control-mode", "explicit", "--cache", str(cache))
    client = httpclient.InferenceServerClient(server.hostport, network_timeout=60)
    client.load_model("onnx_add")  # before the fix: 500 (MemoryError) / no answer (FIFO)
    x = np.ones((1, SIZE), np.float32)
    inp = httpclient.InferInput("INPUT0", [1, SIZE], "FP32")
    inp.set_data_from_numpy(x)
    out = client.infer("onnx_add", [inp]).as_numpy("OUTPUT0")
    assert out is not None and out.shape == (1, SIZE)
    assert "loaded" in server.logs() and "Traceback" not in server.logs()
