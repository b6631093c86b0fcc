"""Repository files that are not regular files, read by the repository's config reader."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from runtime.errors import RepositoryError
from runtime.models.repository import ensemble_cycle, read_model

ENSEMBLE = """
name: "ens"
platform: "ensemble"
ensemble_scheduling { step [ { model_name: "step" model_version: -1 } ] }
"""
DEADLINE_S = 20


def test_an_ensemble_step_whose_config_is_a_fifo_ends_the_cycle_walk(tmp_path: Path) -> None:
    """Before: the cycle check (run on every ensemble load) opened the FIFO and waited for a
    writer for ever, so the ensemble's load never answered."""
    (tmp_path / "ens").mkdir()
    (tmp_path / "ens" / "config.pbtxt").write_text(ENSEMBLE)
    (tmp_path / "step").mkdir()
    fifo = tmp_path / "step" / "config.pbtxt"
    os.mkfifo(fifo)
    got: list[list[str]] = []
    walker = threading.Thread(target=lambda: got.append(ensemble_cycle(tmp_path, "ens")))
    walker.daemon = True
    walker.start()
    walker.join(DEADLINE_S)
    if walker.is_alive():  # release the blocked open so the thread ends
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert got == [[]]


def test_a_config_linked_to_dev_zero_is_refused_not_read(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.pbtxt").symlink_to("/dev/zero")
    # Before: taken for a missing config (the model auto-completed without it).
    with pytest.raises(RepositoryError, match=r"config\.pbtxt: not a regular file"):
        read_model(tmp_path, "m")


def _without_file_permission_bypass() -> list[str]:
    """A command prefix under which permission bits hold: root bypasses them (CAP_DAC_*), so
    as root the child drops those capabilities; [] for any other user."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: permission bits cannot be tested")
    drop = "-dac_override,-dac_read_search"
    return [setpriv, "--bounding-set", drop, "--inh-caps", drop]


def test_a_model_directory_the_server_may_not_read_is_a_repository_error(tmp_path: Path) -> None:
    """Before: `stat` of its config.pbtxt raised PermissionError, which the server answered
    with 500 "internal server error" (and a traceback in its log)."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.pbtxt").write_text('backend: "python"')
    (tmp_path / "m").chmod(0)
    child = (
        "import sys\n"
        "from runtime.errors import RepositoryError\n"
        "from runtime.models.repository import read_model\n"
        "try:\n"
        "    read_model(__import__('pathlib').Path(sys.argv[1]), 'm')\n"
        "except RepositoryError as exc:\n"
        "    print('RepositoryError:', exc)\n"
    )
    try:
        out = subprocess.run(
            [*_without_file_permission_bypass(), sys.executable, "-c", child, str(tmp_path)],
            capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[3],
        )  # fmt: skip
    finally:
        (tmp_path / "m").chmod(0o755)
    assert out.returncode == 0, out.stderr[-1500:]
    assert "RepositoryError:" in out.stdout and "Permission denied" in out.stdout, out.stdout
