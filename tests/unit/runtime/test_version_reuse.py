"""runtime.models.version_reuse: which versions a reload keeps (qa/L0_lifecycle
test_load_new_model_version's steps, as Triton reloads)."""

from __future__ import annotations

import os
from pathlib import Path

from google.protobuf import text_format

from runtime.config import ModelControlMode, ServeConfig
from runtime.models.manager import ModelManager
from runtime.models.version_reuse import reusable_versions, same_but_versions
from runtime.observe.metrics import Metrics
from tests.fixtures.models import python_model
from tritonconfig.schema import mc

_MODEL = (("config.pbtxt", 1, 10), ("1/model.py", 1, 5), ("2/model.py", 1, 5), ("3/model.py", 1, 5))


def _reuse(after: tuple[tuple[str, int, int], ...], selected: list[int]) -> frozenset[str]:
    return reusable_versions(
        before=_MODEL, after=after, loaded={"1", "2"}, selected=selected, same_config=True
    )


def test_a_touched_version_loads_again_an_untouched_one_stays() -> None:
    touched = (*_MODEL[:2], ("2/model.py", 2, 5), _MODEL[3])
    assert _reuse(touched, [1, 2, 3, 4]) == {"1"}


def test_a_file_of_the_model_itself_reloads_every_version() -> None:
    assert _reuse((*_MODEL, ("dummy_dependency.py", 3, 0)), [1, 2]) == frozenset()


def test_a_version_the_policy_drops_is_not_kept_and_pycache_is_no_change() -> None:
    cached = (*_MODEL, ("1/__pycache__/model.cpython-311.pyc", 9, 99))
    assert _reuse(cached, [1]) == {"1"}


def test_a_config_changed_beyond_its_version_policy_reloads_all() -> None:
    def config(text: str) -> mc.ModelConfig:
        return text_format.Parse(text, mc.ModelConfig())

    base = 'name: "m" backend: "python" version_policy: { specific: { versions: [1] } }'
    assert same_but_versions(config(base), config(base.replace("[1]", "[1, 2]")))
    assert not same_but_versions(config(base), config(base + " max_batch_size: 4"))
    assert not same_but_versions(None, config(base))
    assert not reusable_versions(
        before=_MODEL, after=_MODEL, loaded={"1"}, selected=[1], same_config=False
    )


_SIGN_IN_PY = """
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        model_dir = os.path.dirname(os.path.dirname(__file__))
        with open(os.path.join(model_dir, "..", "inits"), "a") as f:
            f.write(args["model_version"] + "\\n")

    def execute(self, requests):
        responses = []
        for r in requests:
            data = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""

_CONFIG = """
name: "versions"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
version_policy: { all: {} }
"""


async def test_a_reload_loads_only_the_versions_whose_files_changed(tmp_path: Path) -> None:
    for version in (1, 2):
        model_dir = python_model(tmp_path, "versions", _CONFIG, _SIGN_IN_PY, version=version)
    manager = ModelManager(
        ServeConfig(repository=tmp_path, model_control_mode=ModelControlMode.EXPLICIT),
        metrics=Metrics(),
    )
    await manager.start()
    try:
        await manager.load("versions")
        model_py = model_dir / "2" / "model.py"
        stat = model_py.stat()
        os.utime(model_py, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        await manager.load("versions")
        assert (tmp_path / "inits").read_text().split() == ["1", "2", "2"]
        assert manager.model_ready("versions", "1") and manager.model_ready("versions", "2")
    finally:
        await manager.stop()
