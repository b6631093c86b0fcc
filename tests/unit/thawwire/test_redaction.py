"""thawwire.redaction: the server's directories and tracebacks never reach an error body."""

from __future__ import annotations

from pathlib import Path

from thawwire.redaction import Redactor


def test_paths_under_a_root_are_shown_relative_and_the_root_as_dot(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    redact = Redactor([repo, None, tmp_path / "cache"])
    assert redact(f"{repo}/m/config.pbtxt:3: bad") == "m/config.pbtxt:3: bad"
    assert redact(f"cannot scan {repo}") == "cannot scan ."
    assert redact(f"{tmp_path}/cache/ab/cd is corrupt") == "ab/cd is corrupt"
    assert redact("nothing to hide") == "nothing to hide"


def test_a_root_given_through_a_symlink_is_cut_in_both_forms(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    redact = Redactor([tmp_path / "link"])
    assert redact(f"{real}/m: x and {tmp_path}/link/n: y") == "m: x and n: y"


def test_a_traceback_is_cut_off() -> None:
    message = 'load failed\nTraceback (most recent call last):\n  File "/srv/x.py", line 1'
    assert Redactor([]).__call__(message) == "load failed"
    assert Redactor([])("Traceback (most recent call last): ...") == "internal server error"
