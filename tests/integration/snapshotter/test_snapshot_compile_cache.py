"""An image of a torch.export program with `TORCH_COMPILE_OPTIONAL_PARAMETERS` carries inductor's
compile caches; a fresh process restoring it compiles from them (no kernel is rebuilt) and
answers like eager; an image built for another torch is not used, and the log says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from snapshotter import ImageLoader
from snapshotter.image_ref import ImageRef
from tests.fixtures.torch_models import make_torch_export_linear

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARAM = "TORCH_COMPILE_OPTIONAL_PARAMETERS"

CHILD = r"""
import json, logging, sys
from pathlib import Path
import numpy as np
from torch._dynamo.utils import counters
from runtime.backends.base import LoadContext
from runtime.backends.torch_backend import TorchBackend
from runtime.inference import InferRequest, InferTensor
from runtime.model_config import parse_config
from snapshotter import ImageLoader

logging.basicConfig(level=logging.INFO)
model_dir, cache, unpack_root = (Path(a) for a in sys.argv[1:4])
loader = ImageLoader(None, cache, "cpu")
image = loader.restore(loader.find(model_dir.name, "1", None))
image.unpack_root = unpack_root
config = parse_config((model_dir / "config.pbtxt").read_text(), str(model_dir))
backend = TorchBackend()
backend.load(LoadContext(model_dir.name, "1", model_dir / "1", model_dir, config, "KIND_CPU", 0,
                         image=image, model_file=model_dir / "1" / "model.pt2"))
x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
request = InferRequest("m", "1", [InferTensor("INPUT__0", "FP32", x.shape, x)])
(response,) = backend.execute([request])
print(json.dumps({"hits": int(counters["inductor"]["fxgraph_cache_hit"]),
                  "output": np.asarray(response.outputs[0].data).tolist()}))
"""


def _child(model_dir: Path, cache: Path, tmp: Path, tag: str) -> tuple[dict, str]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp / f"inductor-{tag}")}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(model_dir), str(cache), str(tmp / f"unpacked-{tag}")],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_fresh_process_compiles_from_the_image_caches(tmp_path: Path) -> None:
    import torch

    model_dir = make_torch_export_linear(tmp_path / "repo")
    config = model_dir / "config.pbtxt"
    config.write_text(
        config.read_text() + f'\nparameters {{ key: "{PARAM}" value {{ string_value: "{{}}" }} }}'
    )
    cache = tmp_path / "cache"
    built = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "snapshot", "build", str(model_dir),
         "--store", str(cache)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-build")},
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    ref = ImageRef("torch_export_linear", "1", "cpu")
    manifest = ImageLoader(None, cache, "cpu").manifest(ref)
    assert manifest.format_version == 2
    assert {"torch_compile_cache", "torch_compile_kernels"} <= set(manifest.artifacts)
    assert manifest.artifact_keys["torch_compile_cache"]["torch"] == torch.__version__
    assert manifest.artifact_keys["torch_compile_cache"]["inputs"] == "float32[1,8]"

    program = torch.export.load(str(model_dir / "1" / "model.pt2")).module()
    x = torch.linspace(-1, 1, 8).reshape(1, 8)
    eager = program(x).detach().numpy()

    hot, _ = _child(model_dir, cache, tmp_path, "hot")
    np.testing.assert_allclose(np.asarray(hot["output"]), eager, rtol=1e-4, atol=1e-5)
    assert hot["hits"] >= 1
    # Every kernel came from the image: the unpacked cache holds exactly the archive's objects.
    (unpacked,) = (tmp_path / "unpacked-hot").iterdir()
    store = ImageLoader(None, cache, "cpu")
    blob = store.restore(ref).artifacts["torch_compile_kernels"]
    (tmp_path / "kernels.tar").write_bytes(blob)
    with tarfile.open(tmp_path / "kernels.tar") as tar:
        archived = {m.name for m in tar.getmembers() if m.name.endswith(".so")}
    on_disk = {p.relative_to(unpacked).as_posix() for p in unpacked.rglob("*.so")}
    assert archived and on_disk == archived

    # The same image claiming another torch: its caches are skipped, with the reason logged.
    path = cache / "images" / "torch_export_linear" / "1" / "cpu" / "manifest.json"
    doc = json.loads(path.read_text())
    for key in doc["artifact_keys"].values():
        key["torch"] = "0.0.0-elsewhere"
    path.write_text(json.dumps(doc))
    cold, log = _child(model_dir, cache, tmp_path, "cold")
    np.testing.assert_allclose(np.asarray(cold["output"]), eager, rtol=1e-4, atol=1e-5)
    assert cold["hits"] == 0
    assert "torch_compile_cache not used: torch: built with 0.0.0-elsewhere" in log
    assert not (tmp_path / "unpacked-cold").exists()


@pytest.mark.gpu
def test_cuda_image_carries_compile_caches_for_its_gpu(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from runtime.backends.base import LoadContext
    from runtime.backends.torch_backend import TorchBackend
    from runtime.inference import InferRequest, InferTensor
    from runtime.model_config import parse_config
    from snapshotter import build_image
    from snapshotter.image_ref import resolve_target
    from snapshotter.stores.dir_store import DirStore

    model_dir = make_torch_export_linear(tmp_path / "repo")
    config_path = model_dir / "config.pbtxt"
    config_path.write_text(
        config_path.read_text()
        + f'\nparameters {{ key: "{PARAM}" value {{ string_value: "{{}}" }} }}'
        + "\ninstance_group [ { kind: KIND_GPU count: 1 } ]\n"
    )
    target = resolve_target("cuda")
    manifest = build_image(model_dir / "1", DirStore(tmp_path / "cache"), target=target)
    assert manifest.artifact_keys["torch_compile_cache"]["target"] == target
    image = ImageLoader(None, tmp_path / "cache", target).restore(
        ImageRef("torch_export_linear", "1", target)
    )
    config = parse_config(config_path.read_text(), str(model_dir))
    backend = TorchBackend()
    with caplog.at_level(logging.INFO):
        backend.load(
            LoadContext(model_dir.name, "1", model_dir / "1", model_dir, config, "KIND_GPU", 0,
                        image=image, model_file=model_dir / "1" / "model.pt2")
        )  # fmt: skip
    assert "not used" not in caplog.text
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    (response,) = backend.execute(
        [InferRequest("m", "1", [InferTensor("INPUT__0", "FP32", x.shape, x)])]
    )
    program = torch.export.load(str(model_dir / "1" / "model.pt2")).module()
    eager = program(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(response.outputs[0].data, eager, rtol=1e-3, atol=1e-4)  # type: ignore[union-attr]
