"""A stub's log messages on the server (runtime.python.stub_services.StubServices.log): the
model's file and line name the record only when they are a plain file name and a line number;
anything else a stub sends (a path, a newline, the wrong types, a bad level) is logged without
them, and never raises."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from runtime.python.stub.wire import Message
from runtime.python.stub_services import StubServices

_LOGGER = "triton_python_backend_utils"


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"level": 1, "file": "model.py", "line": 12}, ("model.py", 12)),
        ({"level": 1, "file": "../../etc/passwd", "line": 1}, None),
        ({"level": 1, "file": "model.py\n2026 E 1 x.py:1] forged", "line": 1}, None),
        ({"level": 1, "file": "", "line": 1}, None),
        ({"level": 1, "file": "m" * 300, "line": 1}, None),
        ({"level": 1, "file": 7, "line": "12"}, None),
        ({"level": 1, "file": "model.py", "line": True}, None),
        ({"level": 1}, None),
    ],
)
def test_only_a_plain_file_name_and_line_name_the_record(
    fields: dict[str, Any], where: tuple[str, int] | None, caplog: pytest.LogCaptureFixture
) -> None:
    services = StubServices(cast(Any, None))
    with caplog.at_level(logging.INFO, logger=_LOGGER):
        services.log(Message({"op": "log", "message": "hello", **fields}))
    (record,) = [r for r in caplog.records if r.name == _LOGGER]
    assert (record.getMessage(), record.levelno) == ("hello", logging.WARNING)
    if where is None:
        assert record.filename != fields.get("file")
    else:
        assert (record.filename, record.lineno) == where


@pytest.mark.parametrize("level", ["x", None, 2.5, [1]])
def test_a_level_that_is_no_level_logs_at_info(
    level: object, caplog: pytest.LogCaptureFixture
) -> None:
    services = StubServices(cast(Any, None))
    with caplog.at_level(logging.INFO, logger=_LOGGER):
        services.log(Message({"op": "log", "level": level, "message": "x"}))
    (record,) = [r for r in caplog.records if r.name == _LOGGER]
    assert record.levelno == logging.INFO
