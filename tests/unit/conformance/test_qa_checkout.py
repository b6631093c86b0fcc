"""A conformance runner without Triton's sources says how to give them (and exits 0)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conformance.qa_checkout import have_mirror


def test_no_mirror_says_which_flag_or_variable_gives_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert not have_mirror(Path(""), "v2.51.0", "qa/L0_http/http_test.py")
    err = capsys.readouterr().err
    assert "--mirror DIR or $TRITON_SERVER_MIRROR" in err
    assert "'.'" not in err  # it used to say "no Triton server mirror at '.'"


def test_a_mirror_without_the_file_names_what_it_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path)], check=True)
    assert not have_mirror(tmp_path, "v2.51.0", "qa/L0_http/http_test.py")
    assert f"{str(tmp_path)!r} has no v2.51.0:qa/L0_http/http_test.py" in capsys.readouterr().err
