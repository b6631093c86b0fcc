"""Repository files that are not regular files, read by the repository's config reader."""

from __future__ import annotations

import contextlib
import os
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
