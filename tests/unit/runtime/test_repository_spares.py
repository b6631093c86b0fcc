"""`thaw serve --python-spare-stubs auto --python-spare-stub-imports auto`: what a warm pod reads
of the repository it mounts (runtime.models.repository_spares), hostile folders included."""

from __future__ import annotations

from pathlib import Path

from runtime.config import ServeConfig
from runtime.models.repository_spares import spare_plan

_CONFIG = 'backend: "python"\ninstance_group [{ count: 2 kind: KIND_CPU }]\n'


def _auto(repo: Path) -> ServeConfig:
    return ServeConfig(
        repository=repo, python_spare_stubs_auto=True, python_spare_stub_imports_auto=True
    )


def test_the_count_and_imports_come_from_the_python_models(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text(_CONFIG)
    (tmp_path / "m" / "1" / "model.py").write_text("import psutil\n")
    assert spare_plan(_auto(tmp_path)) == (2, ("psutil",))
    given = ServeConfig(repository=tmp_path, python_spare_stubs=3,
                        python_spare_stub_imports=("yaml",))  # fmt: skip
    assert spare_plan(given) == (3, ("yaml",))  # nothing `auto`: the flags, unread


def test_hostile_folders_and_configs_are_passed_over(tmp_path: Path) -> None:
    (tmp_path / "m" / "2").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text(_CONFIG)
    (tmp_path / "m" / "2" / "model.py").write_text("import psutil\n")
    # Not versions: a digit int() refuses, one over int64, a leading zero, a file.
    for odd in ("\u00b2", "9" * 40, "07"):
        (tmp_path / "m" / odd).mkdir()
        (tmp_path / "m" / odd / "model.py").write_text("import yaml\n")
    (tmp_path / "m" / "3").write_text("a file, not a version folder")
    (tmp_path / "bad").mkdir()  # a config that does not parse
    (tmp_path / "bad" / "config.pbtxt").write_text("name: {{{\n")
    (tmp_path / "loop").mkdir()  # a config that is a directory
    (tmp_path / "loop" / "config.pbtxt").mkdir()
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "not a name!").mkdir()
    (tmp_path / "huge" / "1").mkdir(parents=True)  # read up to 1 MiB: an import past it unseen
    (tmp_path / "huge" / "config.pbtxt").write_text(_CONFIG)
    (tmp_path / "huge" / "1" / "model.py").write_text("x = 1\n" * 200_000 + "import requests\n")
    assert spare_plan(_auto(tmp_path)) == (2, ("psutil",))


def test_a_missing_repository_reads_as_no_python_model(tmp_path: Path) -> None:
    assert spare_plan(_auto(tmp_path / "gone")) == (0, ())
