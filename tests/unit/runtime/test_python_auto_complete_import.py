"""A Python model's `auto_complete_config` found wherever its model class comes from, as
Triton's stub finds it (qa/L0_model_namespacing: model.py is `from python_addsub import *`,
the hook in the module it imports), while a model file that defines a class of no base and
never names the hook is not imported to look (runtime.python.auto_complete.mentions_hook)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from runtime.python.auto_complete import mentions_hook
from runtime.python.backend import auto_complete_config
from tritonconfig import parse_config

_SHARED = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [16]})
        config.add_output({"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [16]})
        return config

    def execute(self, requests):
        return []
"""


def test_a_hook_from_an_imported_module_completes_the_config(tmp_path: Path) -> None:
    (tmp_path / "lib" / "shared_addsub").mkdir(parents=True)
    (tmp_path / "lib" / "shared_addsub" / "__init__.py").write_text(_SHARED)
    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True)
    model_file = model_dir / "1" / "model.py"
    model_file.write_text(textwrap.dedent(f"""
        import sys
        sys.path.append({str(tmp_path / "lib")!r})
        from shared_addsub import *
        """))  # fmt: skip
    assert mentions_hook(model_file)
    config = auto_complete_config(
        parse_config('name: "m"\nbackend: "python"\n', "m"), model_file, model_dir=model_dir
    )
    assert [i.name for i in config.input] == ["INPUT0"]
    assert [o.name for o in config.output] == ["OUTPUT0"]


@pytest.mark.parametrize(
    ("source", "may_have_one"),
    [
        ("class TritonPythonModel:\n    pass\n", False),
        ("class TritonPythonModel():\n    pass\n", False),
        ("class TritonPythonModel(object):\n    pass\n", False),
        ("class TritonPythonModel(Base):\n    pass\n", True),
        ("from elsewhere import TritonPythonModel\n", True),
        ("class TritonPythonModel:\n    def auto_complete_config(c):\n        return c\n", True),
    ],
)
def test_which_model_files_are_imported_to_look_for_the_hook(
    tmp_path: Path, source: str, may_have_one: bool
) -> None:
    model_file = tmp_path / "model.py"
    model_file.write_text(source)
    assert mentions_hook(model_file) is may_have_one
