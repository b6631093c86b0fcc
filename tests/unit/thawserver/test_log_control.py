"""The process's logging under the logging extension's settings: severities turned off drop
their lines, the verbose level lets debug lines through, the format changes at once, and the
operator's file is the only one written."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from thawserver.log_control import LogControl
from thawwire.log_settings import LogFormat, LogSettings


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_settings_govern_what_reaches_the_operators_file(tmp_path: Path) -> None:
    log_file = tmp_path / "server.log"
    control = LogControl(LogSettings(file=str(log_file)))
    control.install()
    log = logging.getLogger("thaw.test")
    log.info("info one")
    log.debug("debug hidden")
    control.apply(LogSettings(file=str(log_file), info=False, verbose_level=1))
    log.info("info hidden")
    log.debug("debug shown")
    log.warning("warning shown")
    control.apply(LogSettings(file=str(log_file), warning=False, error=False))
    log.warning("warning hidden")
    log.error("error hidden")
    control.apply(LogSettings(file=str(log_file), format=LogFormat.ISO8601))
    log.info("iso line")
    log.info('two "quoted"\nlines')
    lines = _lines(log_file)
    text = "\n".join(lines)
    for hidden in ("debug hidden", "info hidden", "warning hidden", "error hidden"):
        assert hidden not in text
    assert [line.rsplit(": ", 1)[-1] for line in lines[:3]] == [
        "info one", "debug shown", "warning shown"
    ]  # fmt: skip
    # Triton 2.51's ISO8601 record: time, severity letter, pid, file:line] "message", the
    # message quoted and escaped (one record, one line).
    record = r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ test_log_control\.py:\d+\] '
    assert re.fullmatch(record + '"iso line"', lines[-2]), lines[-2]
    assert re.fullmatch(record + r'"two \\"quoted\\"\\nlines"', lines[-1]), lines[-1]


def test_a_quieter_floor_holds_at_verbose_level_zero() -> None:
    control = LogControl(LogSettings(), quietest=logging.WARNING)
    control.install()
    assert logging.getLogger().level == logging.WARNING
    control.apply(LogSettings(verbose_level=1))
    assert logging.getLogger().level == logging.DEBUG
