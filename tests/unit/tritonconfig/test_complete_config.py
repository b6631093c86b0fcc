"""`complete_config`: Triton's completion order on a model directory, and the package's reach."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.models import make_python_identity
from tests.fixtures.onnx_models import make_onnx_identity
from tritonconfig import ModelConfigError, complete_config, parse_config
from tritonconfig.schema import mc

IO = (
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
)


def _complete(model_dir: Path, text: str, **options: bool) -> tuple[mc.ModelConfig, list[int]]:
    config = parse_config(text, "c")
    config.name = model_dir.name
    settings = {"gpu_available": False, "require_model_files": True} | options
    return config, complete_config(config, model_dir, "c", **settings)


def test_onnx_model_without_a_config_gets_platform_tensors_and_batching(tmp_path: Path) -> None:
    model_dir = make_onnx_identity(tmp_path, "auto", with_config=False)
    config, versions = _complete(model_dir, "")
    assert versions == [1]
    assert (config.platform, config.backend) == ("onnxruntime_onnx", "onnxruntime")
    assert config.max_batch_size == 4
    assert [(t.name, list(t.dims)) for t in config.input] == [("INPUT0", [-1])]
    assert list(config.dynamic_batching.preferred_batch_size) == [4]
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU


def test_a_missing_model_file_is_refused_only_when_required(tmp_path: Path) -> None:
    model_dir = tmp_path / "later"
    (model_dir / "1").mkdir(parents=True)
    text = 'backend: "python"\n' + IO
    with pytest.raises(ModelConfigError, match=r"model file .*model\.py is missing"):
        _complete(model_dir, text)
    _, versions = _complete(model_dir, text, require_model_files=False)
    assert versions == [1]


def test_the_version_policy_picks_the_served_versions(tmp_path: Path) -> None:
    model_dir = make_python_identity(tmp_path, "py")
    for version in ("2", "10"):
        (model_dir / version).mkdir()
        (model_dir / version / "model.py").write_text("")
    text = 'backend: "python"\n' + IO
    assert _complete(model_dir, text)[1] == [10]
    assert _complete(model_dir, text + "version_policy: { all { } }")[1] == [1, 2, 10]
    latest_two = text + "version_policy: { latest { num_versions: 2 } }"
    assert _complete(model_dir, latest_two)[1] == [2, 10]


@pytest.mark.parametrize(("backend", "kind"), [("onnxruntime", "KIND_GPU"), ("python", "KIND_CPU")])
def test_auto_instance_groups_go_to_the_gpu_when_there_is_one(
    tmp_path: Path, backend: str, kind: str
) -> None:
    make = make_onnx_identity if backend == "onnxruntime" else make_python_identity
    model_dir = make(tmp_path, "m")
    config, _ = _complete(model_dir, f'backend: "{backend}"\n' + IO, gpu_available=True)
    group = config.instance_group[0]
    assert mc.ModelInstanceGroup.Kind.Name(group.kind) == kind
    assert list(group.gpus) == ([0] if kind == "KIND_GPU" else [])


def test_importing_the_package_pulls_in_neither_grpc_nor_another_thaw_package() -> None:
    code = (
        "import sys, tritonconfig\n"
        "tritonconfig.mc.ModelConfig()\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules}\n"
        "             & {'grpc', 'runtime', 'activator', 'snapshotter', 'thaw', 'onnx'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""
