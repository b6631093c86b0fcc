"""What `thaw up`'s spare stubs import ahead by default: the installed packages the repository's
Python models import, read from their source (thawserver.python_imports)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from thawserver.python_imports import (
    changes_its_setup,
    imported_packages,
    installed,
    spare_imports,
)
from tritonconfig.schema import mc

_MODEL = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils
import requests.adapters as adapters
from psutil import Process
from . import helpers
from .local import thing


class TritonPythonModel:
    def initialize(self, args):
        import yaml  # a lazy import is the model's import all the same
        from torch.nn import functional
"""


def test_each_absolute_imports_top_level_package_first_seen_first() -> None:
    names = imported_packages(_MODEL)
    assert names[:5] == ["json", "numpy", "triton_python_backend_utils", "requests", "psutil"]
    assert set(names[5:]) == {"yaml", "torch"}  # inside a function: found too
    assert "helpers" not in names and "local" not in names  # relative: the model's own


@pytest.mark.parametrize("source", ["def broken(:\n", "\x00", "import (\n"])
def test_a_file_that_does_not_parse_names_nothing(source: str) -> None:
    assert imported_packages(source) == []


def test_only_installed_packages_less_the_stdlib_and_what_a_stub_imports_anyway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "on_pythonpath.py").write_text("raise SystemExit('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    names = ["json", "numpy", "triton_python_backend_utils", "psutil", "on_pythonpath",
             "no_such_module_at_all", "runtime", "yaml"]  # fmt: skip
    # runtime: Thaw's own, from its checkout (an editable install): not site-packages.
    assert installed(names) == ["psutil", "yaml"]
    assert installed(names, shadows={"yaml"}) == ["psutil"]


@dataclass
class _Model:
    directory: Path
    config: mc.ModelConfig
    versions: tuple[str, ...] = ("1",)
    files: dict[str, str] = field(default_factory=dict)

    def write(self) -> _Model:
        for name, text in self.files.items():
            path = self.directory / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return self


def _python(directory: Path, **files: str) -> _Model:
    return _Model(directory, mc.ModelConfig(name=directory.name, backend="python"),
                  files={k.replace("__", "/"): v for k, v in files.items()}).write()  # fmt: skip


def test_the_repositorys_python_models_and_their_helpers_are_read(tmp_path: Path) -> None:
    first = _python(tmp_path / "a", **{"1__model.py": "import yaml\nfrom helpers import f\n",
                                       "1__helpers.py": "import psutil\n"})  # fmt: skip
    second = _python(tmp_path / "b", **{"1__model.py": "import requests\nimport yaml\n"})
    assert spare_imports([first, second], limit=8) == ("yaml", "psutil", "requests")
    assert spare_imports([first, second], limit=2) == ("yaml", "psutil")


def test_a_name_the_models_folder_holds_stays_the_models(tmp_path: Path) -> None:
    # Its own requests.py: a spare that imported the installed requests would hand it that.
    model = _python(tmp_path / "m", **{"1__model.py": "import requests\nimport psutil\n",
                                       "1__requests.py": "x = 1\n"})  # fmt: skip
    assert spare_imports([model], limit=8) == ("psutil",)
    (tmp_path / "m" / "psutil").mkdir()  # a package folder beside the versions: its own too
    assert spare_imports([model], limit=8) == ()


def test_models_that_take_no_spare_are_not_read(tmp_path: Path) -> None:
    own_env = _python(tmp_path / "env", **{"1__model.py": "import yaml\n"})
    own_env.config.parameters["EXECUTION_ENV_PATH"].string_value = "$$TRITON_MODEL_DIRECTORY/e"
    onnx = _Model(tmp_path / "onnx", mc.ModelConfig(name="onnx", backend="onnxruntime"),
                  files={"1/export.py": "import psutil\n"}).write()  # fmt: skip
    unversioned = _python(tmp_path / "none", **{"model.py": "import requests\n"})
    unversioned.versions = ()
    assert spare_imports([own_env, onnx, unversioned], limit=8) == ()


@pytest.mark.parametrize(
    ("source", "changes"),
    [
        ('import os\nos.environ["OMP_NUM_THREADS"] = "1"\nimport torch\n', True),
        ('import os\nos.environ.setdefault("HF_HOME", "/x")\n', True),
        ('from os import environ\nenviron["A"] = "1"\n', True),
        ('import os\ndel os.environ["A"]\n', True),
        ('import os\nos.putenv("A", "1")\n', True),
        ('import sys\nsys.path.insert(0, "/opt/libs")\n', True),
        ('import sys\nsys.path = ["/opt/libs"]\n', True),
        ('import os\nlevel = os.environ.get("LEVEL")\n', False),  # reads: no change
        ("import sys\nprint(sys.path)\n", False),
        ("def broken(:\n", False),
    ],
)
def test_a_model_that_sets_its_environment_or_import_path_is_seen(
    source: str, changes: bool
) -> None:
    assert changes_its_setup(source) is changes


def test_a_model_that_sets_something_before_its_imports_is_left_to_import_them_itself(
    tmp_path: Path,
) -> None:
    # torch reads OMP_NUM_THREADS at its import: a spare importing it first would ignore it.
    sets_env = _python(tmp_path / "env", **{
        "1__model.py": "import psutil\n",
        "1__setup.py": 'import os\nos.environ["OMP_NUM_THREADS"] = "1"\nimport yaml\n',
    })  # fmt: skip
    plain = _python(tmp_path / "plain", **{"1__model.py": "import requests\n"})
    assert spare_imports([sets_env, plain], limit=8) == ("requests",)
