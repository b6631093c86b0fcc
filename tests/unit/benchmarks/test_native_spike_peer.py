"""benchmarks/peers.py NativeSpikePeer: what it refuses before it builds or starts anything."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.peers import NativeSpikePeer, PeerError
from benchmarks.workloads import write_add_sub


def test_a_repository_without_exactly_one_python_model_is_refused(tmp_path: Path) -> None:
    write_add_sub(tmp_path)
    shutil.copytree(tmp_path / "add_sub", tmp_path / "add_sub_2")
    with pytest.raises(PeerError, match="one Python model"):
        NativeSpikePeer().start(tmp_path, 1)


def test_without_cargo_the_build_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no cargo on it
    with pytest.raises(PeerError) as refused:
        NativeSpikePeer().prepare()
    assert "cargo" in str(refused.value)
    assert all(package in str(refused.value) for package in NativeSpikePeer.debian_packages)
