"""thawserver.redaction: the server's directories and tracebacks never reach an error body."""

from __future__ import annotations

from pathlib import Path

from thawserver.redaction import Redactor


def test_paths_under_a_root_are_shown_relative_and_the_root_as_dot(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    redact = Redactor([repo, None, tmp_path / "cache"])
    assert redact(f"{repo}/m/config.pbtxt:3: bad") == "m/config.pbtxt:3: bad"
    assert redact(f"cannot scan {repo}") == "cannot scan ."
    assert redact(f"{tmp_path}/cache/ab/cd is corrupt") == "ab/cd is corrupt"
    assert redact("nothing to hide") == "nothing to hide"


def test_a_root_given_unnormalized_is_cut_in_its_normal_form(tmp_path: Path) -> None:
    redact = Redactor([Path(f"{tmp_path}/models/")])
    assert redact(f"{tmp_path}/models/m: x") == "m: x"
    assert redact(str(tmp_path)) == str(tmp_path)  # its parent is not hidden


def test_a_traceback_is_cut_off() -> None:
    message = 'load failed\nTraceback (most recent call last):\n  File "/srv/x.py", line 1'
    assert Redactor([]).__call__(message) == "load failed"
    assert Redactor([])("Traceback (most recent call last): ...") == "internal server error"


def test_index_rows_have_their_reason_redacted() -> None:
    redact = Redactor([Path("/srv/models")])
    rows = [
        {"name": "ok", "version": "1", "state": "READY"},
        {"name": "bad", "state": "UNAVAILABLE", "reason": "/srv/models/bad/config.pbtxt:3: x"},
    ]
    assert redact.index(rows) == [
        {"name": "ok", "version": "1", "state": "READY"},
        {"name": "bad", "state": "UNAVAILABLE", "reason": "bad/config.pbtxt:3: x"},
    ]


def test_a_root_is_cut_only_where_it_is_a_whole_path() -> None:
    # `thaw up --model-repository repo`: the relative root must not eat into words and other
    # paths ("no such model in the repository" read "in the .sitory").
    redact = Redactor([Path("repo"), Path("/srv/models")])
    assert redact("failed to load 'nope': no such model in the repository") == (
        "failed to load 'nope': no such model in the repository"
    )
    assert redact("repo/m/config.pbtxt:3: bad") == "m/config.pbtxt:3: bad"
    assert redact("cannot scan repo") == "cannot scan ."
    assert redact("'repo': gone") == "'.': gone"
    assert redact("other/repo/m and repo2/m and /srv/models2 and /srv/models.d") == (
        "other/repo/m and repo2/m and /srv/models2 and /srv/models.d"
    )
    assert redact("at /srv/models/m/1/model.py:2 and (/srv/models)") == (
        "at m/1/model.py:2 and (.)"
    )
