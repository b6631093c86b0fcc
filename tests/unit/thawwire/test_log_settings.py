"""The logging extension's settings: a client's update checked whole, in Triton 2.51's words,
and never a file location (CVE-2024-0087)."""

from __future__ import annotations

import pytest

from thawwire.log_settings import LogFormat, LogSettings, SettingsRefused, update_log_settings


def test_an_update_changes_what_it_names_and_nothing_else() -> None:
    start = LogSettings(file="server.log")
    after = update_log_settings(start, {"log_info": False, "log_verbose_level": 2,
                                        "log_format": "ISO8601", "log_error": None})  # fmt: skip
    assert after == LogSettings(
        file="server.log", info=False, verbose_level=2, format=LogFormat.ISO8601
    )
    assert after.as_json()["log_file"] == "server.log"


@pytest.mark.parametrize("path", ["../../etc/passwd", "/tmp/x.log", "log_file.log", ""])
def test_no_client_chooses_the_log_file(path: str) -> None:
    with pytest.raises(SettingsRefused, match=r"^log file location can not be updated") as info:
        update_log_settings(LogSettings(), {"log_file": path, "log_info": False})
    assert info.value.unsupported


def test_a_null_log_file_is_no_change_as_in_triton() -> None:
    assert update_log_settings(LogSettings(), {"log_file": None}) == LogSettings()


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"log_info": "false"}, "expect boolean for 'log_info'"),
        ({"log_warning": 0}, "expect boolean for 'log_warning'"),
        ({"log_verbose_level": True}, "expect int32 for 'log_verbose_level'"),
        ({"log_verbose_level": "1"}, "expect int32"),
        ({"log_verbose_level": -1}, r"must be in \[0, 2147483647\]"),
        ({"log_verbose_level": 1 << 40}, "must be in"),
        ({"log_format": "JSON"}, "invalid argument for log_format, got: JSON"),
        ({"log_format": 1}, "expect string for 'log_format'"),
        ({"log_level": "debug"}, "unknown log setting 'log_level'"),
    ],
)
def test_bad_updates_are_refused_and_nothing_applies(doc: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsRefused, match=message) as info:
        update_log_settings(LogSettings(), {"log_info": False, **doc})
    assert not info.value.unsupported


def test_v2_lists_logging_and_trace() -> None:
    from thawwire.extensions import EXTENSIONS

    assert "logging" in EXTENSIONS and "trace" in EXTENSIONS
