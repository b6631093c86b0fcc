"""The activator completes and checks configs as a replica does (answers at zero replicas).

The integration test `test_config_parity.py` compares these answers with a real replica's;
these are the fast checks of the same rules.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from activator.config import ScaleSettings
from activator.fleet.repository import Repository
from tests.fixtures.models import make_python_identity
from tests.fixtures.onnx_models import make_onnx_identity

IO = (
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
)


def _scan(root: Path) -> Repository:
    return Repository.scan(root, ScaleSettings())


def test_onnx_model_without_a_config_is_auto_completed_from_its_graph(tmp_path: Path) -> None:
    make_onnx_identity(tmp_path, "auto", with_config=False)
    entry = _scan(tmp_path).get("auto")
    assert entry.metadata() == {
        "name": "auto",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]}],
        "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, -1]}],
    }
    config = entry.config_json()
    assert config["max_batch_size"] == 4  # Triton's default-max-batch-size for a batchable graph
    assert config["dynamic_batching"]["preferred_batch_size"] == [4]


def test_onnx_tensors_are_filled_in_when_the_config_has_none(tmp_path: Path) -> None:
    model = make_onnx_identity(tmp_path, "partial")
    (model / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\nmax_batch_size: 16\n')
    config = _scan(tmp_path).get("partial").config_json()
    assert config["max_batch_size"] == 16
    assert [(t["name"], t["dims"]) for t in config["input"]] == [("INPUT0", [-1])]
    # Triton's onnxruntime backend (r24.10, `AutoCompleteMaxBatch`) turns the dynamic batcher
    # on for a graph that can batch whenever max_batch_size is over 1, given or auto-completed.
    assert config["dynamic_batching"]["preferred_batch_size"] == [16]


def test_config_json_keys_are_in_the_proto_declaration_order(tmp_path: Path) -> None:
    make_python_identity(tmp_path, "py", max_batch_size=2)
    config = _scan(tmp_path).get("py").config_json()
    declared = [f.name for f in mc.ModelConfig.DESCRIPTOR.fields]
    assert list(config) == [name for name in declared if name in config]
    group = config["instance_group"][0]
    group_order = [f.name for f in mc.ModelInstanceGroup.DESCRIPTOR.fields]
    assert list(group) == [name for name in group_order if name in group]


def test_metadata_for_one_version_lists_only_that_version(tmp_path: Path) -> None:
    model = make_python_identity(tmp_path, "py")
    (model / "2").mkdir()
    (model / "2" / "model.py").write_text((model / "1" / "model.py").read_text())
    with (model / "config.pbtxt").open("a") as f:
        f.write("version_policy: { all { } }\n")
    entry = _scan(tmp_path).get("py")
    assert entry.metadata()["versions"] == ["1", "2"]
    assert entry.metadata("2")["versions"] == ["2"]


PY = 'backend: "python"\n'
DUPLICATE = IO.replace("OUTPUT0", "INPUT0").replace("output", "input")
REFUSED = [
    ('platform: "onnxruntime_onnx"\nbackend: "pytorch"\n' + IO, "does not match backend"),
    ('backend: "tensorflow"\n' + IO, "unsupported backend 'tensorflow'"),
    ('platform: "tensorflow_savedmodel"\n' + IO, "unexpected platform type"),
    (PY + IO.replace("-1", "0", 1), "dimension must be integer >= 1"),
    (PY + DUPLICATE, "duplicate input name 'INPUT0'"),
    (PY + IO + "version_policy: { specific { versions: [ 7 ] } }\n", r"versions \[7\] that do"),
    (PY + IO.replace("TYPE_FP32", "TYPE_INVALID", 1), "must specify 'data_type'"),
    (PY + "max_batch_size: -1\n" + IO, "'max_batch_size' must be non-negative value"),
]


@pytest.mark.parametrize(("config", "reason"), REFUSED)
def test_a_config_a_replica_refuses_makes_the_model_unavailable(
    tmp_path: Path, config: str, reason: str
) -> None:
    model = make_python_identity(tmp_path, "m")
    (model / "config.pbtxt").write_text(config)
    repo = _scan(tmp_path)
    assert repo.names() == []
    assert repo.unavailable["m"].startswith(str(model))  # names the model
    assert re.search(reason, repo.unavailable["m"]), repo.unavailable["m"]


def test_a_config_is_judged_before_its_name_is_compared_with_the_directory(
    tmp_path: Path,
) -> None:
    """Triton's order, and a replica's words (runtime.models.repository.read_model)."""
    model = make_python_identity(tmp_path, "m")
    config = model / "config.pbtxt"
    config.write_text('name: "other"\n' + PY + "max_batch_size: -1\n" + IO)
    reason = _scan(tmp_path).unavailable["m"]
    assert reason == f"{config}: 'max_batch_size' must be non-negative value for other"
    config.write_text('name: "other"\n' + PY + IO)
    assert (
        _scan(tmp_path).unavailable["m"] == f"{config}: name 'other' does not match directory 'm'"
    )


def test_a_model_without_version_directories_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.pbtxt").write_text('backend: "python"\n' + IO)
    repo = _scan(tmp_path)
    assert "no version directory to serve" in repo.unavailable["empty"]


def test_a_missing_model_file_is_left_to_the_wake_up(tmp_path: Path) -> None:
    """`thaw up` reads the repository once: a file copied in later must still be served."""
    (tmp_path / "later" / "1").mkdir(parents=True)
    (tmp_path / "later" / "config.pbtxt").write_text('backend: "python"\n' + IO)
    assert _scan(tmp_path).names() == ["later"]


def test_the_activator_serves_every_name_a_replica_serves(tmp_path: Path) -> None:
    """One name rule (thawwire.names): a 200-character model is `thaw serve`'s and `thaw up`'s
    alike; `a..b`, which no replica loads, is skipped by both."""
    from runtime.models.repository import list_models

    long_name = "m" * 200
    for name in (long_name, "a..b"):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "config.pbtxt").write_text('backend: "python"\n' + IO)
    repo = _scan(tmp_path)
    assert repo.names() == [long_name] == list_models(tmp_path)
    assert repo.get(long_name).metadata()["name"] == long_name


_HOOKED_PY = {
    "method": "class TritonPythonModel:\n"
    "    @staticmethod\n"
    "    def auto_complete_config(c):\n"
    "        return c\n",
    "assigned": "def hook(c):\n    return c\n\n"
    "class TritonPythonModel:\n    auto_complete_config = staticmethod(hook)\n",
    "unparsable": "class TritonPythonModel:\n    def auto_complete_config(c):\n  return(\n",
}
_PLAIN_PY = {
    "none": "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n",
    "other class": "class Helper:\n    def auto_complete_config(c):\n        return c\n"
    "class TritonPythonModel:\n    pass\n",
    "in a string": 'DOC = "auto_complete_config"\nclass TritonPythonModel:\n    pass\n',
}


@pytest.mark.parametrize("source", _HOOKED_PY.values(), ids=list(_HOOKED_PY))
def test_a_python_models_own_auto_complete_config_is_found_without_running_it(
    tmp_path: Path, source: str
) -> None:
    model = make_python_identity(tmp_path, "hooked")
    (model / "1" / "model.py").write_text("raise SystemExit('never run')\n" + source)
    assert _scan(tmp_path).get("hooked").replica_completes


@pytest.mark.parametrize("source", _PLAIN_PY.values(), ids=list(_PLAIN_PY))
def test_a_python_model_without_the_hook_is_completed_here(tmp_path: Path, source: str) -> None:
    model = make_python_identity(tmp_path, "plain")
    (model / "1" / "model.py").write_text(source)
    assert not _scan(tmp_path).get("plain").replica_completes


def test_only_python_models_are_completed_by_a_replica(tmp_path: Path) -> None:
    make_onnx_identity(tmp_path, "onnx")
    assert not _scan(tmp_path).get("onnx").replica_completes


@pytest.mark.parametrize(("default", "batching"), [(5, True), (1, False), (0, False)])
def test_default_max_batch_size_sets_what_auto_complete_gives(
    tmp_path: Path, default: int, batching: bool
) -> None:
    # tritonserver's `--backend-config=onnxruntime,default-max-batch-size=N`
    # (qa/L0_backend_config): N for a graph that can batch and a config without
    # max_batch_size; the dynamic batcher only when N is over 1.
    make_onnx_identity(tmp_path, "auto", with_config=False)
    entry = Repository.scan(tmp_path, ScaleSettings(), default_max_batch_size=default).get("auto")
    config = entry.config_json()
    assert config["max_batch_size"] == default
    assert ("dynamic_batching" in config) is batching
    # the graph's [-1, -1]: its first dimension is the batch's, unless there is no batching
    assert config["input"][0]["dims"] == ([-1] if default else [-1, -1])
    assert entry.metadata()["inputs"][0]["shape"] == [-1, -1]
    given = tmp_path / "given"
    given.mkdir()
    model = make_onnx_identity(given, "set")
    (model / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\nmax_batch_size: 2\n')
    set_config = Repository.scan(given, ScaleSettings(), default_max_batch_size=default)
    assert set_config.get("set").config_json()["max_batch_size"] == 2  # the config's wins
