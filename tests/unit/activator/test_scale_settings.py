"""Scale settings from flags and config.pbtxt; repository metadata without waking a model."""

from __future__ import annotations

from pathlib import Path

import pytest

from activator.config import Placement, ScaleSettings, validated
from activator.errors import ConfigError, ModelUnavailable, UnknownModel
from activator.fleet.repository import Repository

CONFIG = """
name: "bert"
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, 224 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_STRING dims: [ -1 ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 100 }}
{params}
"""


def _repo(tmp_path: Path, params: str = "", versions: tuple[str, ...] = ("1",)) -> Path:
    model = tmp_path / "bert"
    for v in versions:
        (model / v).mkdir(parents=True)
        (model / v / "model.onnx").write_bytes(b"x" * 10)
    (model / "config.pbtxt").write_text(CONFIG.format(params=params))
    return tmp_path


def _param(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}'


def test_invalid_parameter_refused_with_key_value_model_and_range(tmp_path: Path) -> None:
    root = _repo(tmp_path, _param("thaw.stable_window_s", "3"))
    with pytest.raises(ConfigError) as info:
        Repository.scan(root, ScaleSettings())
    assert info.value.message == "`thaw.stable_window_s` = 3 (model bert), must be in [6, 3600]"


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("thaw.min_replicas", "many", "`thaw.min_replicas` = 'many' (model bert), must be an int"),
        ("thaw.max_replicas", "0", "`thaw.max_replicas` = 0 (model bert), must be in [1, 100]"),
        ("thaw.target_concurrency", "inf", "must be in [0.01, 100000]"),
        ("thaw.scale_to_zero_grace_s", "-1", "must be in [0, 86400]"),
        ("thaw.bogus", "1", "unknown setting `thaw.bogus` (model bert)"),
        (
            "thaw.placement",
            "sharde",
            "`thaw.placement` = 'sharde' (model bert), must be dedicated or shared",
        ),
        (
            "thaw.python_runtime",
            "inprocess",
            "`thaw.python_runtime` = 'inprocess', must be one of process, in_process, auto "
            "(model bert)",
        ),
    ],
)
def test_bad_values_name_the_problem(tmp_path: Path, key: str, value: str, expected: str) -> None:
    root = _repo(tmp_path, _param(key, value))
    with pytest.raises(ConfigError) as info:
        Repository.scan(root, ScaleSettings())
    assert expected in info.value.message


def test_parameters_override_flag_defaults(tmp_path: Path) -> None:
    root = _repo(tmp_path, _param("thaw.max_replicas", "2") + _param("other", "kept"))
    defaults = validated(ScaleSettings(), {"max_replicas": "7", "target_concurrency": "3"})
    settings = Repository.scan(root, defaults).get("bert").settings
    assert settings.max_replicas == 2
    assert settings.target_concurrency == 3.0


@pytest.mark.parametrize("value", ["process", "in_process", " auto ", ""])
def test_the_runtimes_own_parameters_pass_through(tmp_path: Path, value: str) -> None:
    # thaw.python_runtime is read by the replica from the same config.pbtxt: `thaw up` must not
    # refuse it as an unknown setting (it did), and it changes none of the activator's settings.
    root = _repo(tmp_path, _param("thaw.python_runtime", value))
    assert Repository.scan(root, ScaleSettings()).get("bert").settings == ScaleSettings()


def test_placement_is_dedicated_unless_a_model_asks_to_share(tmp_path: Path) -> None:
    assert ScaleSettings().placement is Placement.DEDICATED
    shared = Repository.scan(_repo(tmp_path, _param("thaw.placement", " Shared ")), ScaleSettings())
    assert shared.get("bert").settings.placement is Placement.SHARED


def test_flag_errors_name_the_flag() -> None:
    with pytest.raises(ConfigError, match=r"`--panic-window-s` = 0, must be in \[1, 3600\]"):
        validated(ScaleSettings(), {"panic_window_s": "0"})
    with pytest.raises(ConfigError, match="min_replicas"):
        validated(ScaleSettings(), {"min_replicas": "5", "max_replicas": "2"})


def test_metadata_and_config_answered_from_the_repository(tmp_path: Path) -> None:
    entry = Repository.scan(_repo(tmp_path, versions=("1", "3")), ScaleSettings()).get("bert")
    assert entry.metadata() == {
        "name": "bert",
        "versions": ["3"],
        "platform": "onnxruntime_onnx",  # completed the way the runtime (and Triton) does
        "inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, 3, 224]}],
        "outputs": [{"name": "OUT", "datatype": "BYTES", "shape": [-1, -1]}],
    }
    config = entry.config_json()
    assert config["input"][0]["dims"] == [3, 224]  # numbers, as Triton writes them
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert config["max_batch_size"] == 8


def test_unknown_and_hostile_names_are_404(tmp_path: Path) -> None:
    repo = Repository.scan(_repo(tmp_path), ScaleSettings())
    for name in ["nope", "..", "../bert", "bert;rm -rf", "", "a" * 500]:
        with pytest.raises(UnknownModel):
            repo.get(name)
    with pytest.raises(UnknownModel, match="'bert' version 2 is not found"):
        repo.get("bert", "2")


def test_corrupt_config_is_refused_with_its_path(tmp_path: Path) -> None:
    (tmp_path / "bad" / "1").mkdir(parents=True)
    (tmp_path / "bad" / "config.pbtxt").write_bytes(b"name: \xff\xfe {{{")
    with pytest.raises(ConfigError, match=r"bad/config\.pbtxt"):
        Repository.scan(tmp_path, ScaleSettings(), strict=True)


def test_corrupt_config_makes_only_that_model_unavailable(tmp_path: Path) -> None:
    _repo(tmp_path)
    (tmp_path / "bad" / "1").mkdir(parents=True)
    (tmp_path / "bad" / "config.pbtxt").write_text('name: "bad" input [ { name: ')
    (tmp_path / "nocfg" / "1").mkdir(parents=True)
    (tmp_path / "stray.txt").write_text("not a model")
    (tmp_path / ".git").mkdir()
    repo = Repository.scan(tmp_path, ScaleSettings())
    assert repo.names() == ["bert"]
    assert set(repo.unavailable) == {"bad", "nocfg"}
    assert repo.unavailable["bad"].startswith(f"{tmp_path / 'bad' / 'config.pbtxt'}:1: ")
    with pytest.raises(ModelUnavailable, match=r"model 'bad' is not ready: .*config\.pbtxt"):
        repo.get("bad")


def test_invalid_thaw_setting_still_stops_start_up(tmp_path: Path) -> None:
    _repo(tmp_path, _param("thaw.stable_window_s", "3"))
    with pytest.raises(ConfigError, match="stable_window_s"):
        Repository.scan(tmp_path, ScaleSettings())


def test_config_is_completed_like_the_runtime_does(tmp_path: Path) -> None:
    model = tmp_path / "py"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text("")
    (model / "config.pbtxt").write_text('input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]')
    config = Repository.scan(tmp_path, ScaleSettings()).get("py").config_json()
    assert config["backend"] == "python"  # inferred from the model file
    assert config["version_policy"] == {"latest": {"num_versions": 1}}
    assert config["default_model_filename"] == "model.py"
    assert config["instance_group"][0]["name"] == "py"
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
