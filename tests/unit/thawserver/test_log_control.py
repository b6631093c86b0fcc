"""The process's logging under the logging extension's settings: severities turned off drop
their lines, the verbose level lets debug lines through, the format changes at once, and the
operator's file is the only one written."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from pathlib import Path

from thawserver.log_control import RELAYED, LogControl
from thawserver.log_records import ESCAPE_ENV, TABLE, TritonRecord, escapes_messages, table
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
    # tritonserver 2.51's default record: severity letter and UTC time to the microsecond,
    # pid, file:line] "message"; a verbose line is an I record.
    pid = os.getpid()
    default = rf"[IWE]\d{{4}} \d\d:\d\d:\d\d\.\d{{6}} {pid} test_log_control\.py:\d+\] "
    assert re.fullmatch(default.replace("[IWE]", "I") + '"info one"', lines[0]), lines[0]
    assert re.fullmatch(default.replace("[IWE]", "I") + '"debug shown"', lines[1]), lines[1]
    assert re.fullmatch(default.replace("[IWE]", "W") + '"warning shown"', lines[2]), lines[2]
    # Its ISO8601 record: time to the second, severity letter, pid, file:line] "message", the
    # message quoted and escaped (one record, one line).
    record = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ test_log_control\.py:\d+\] "
    assert re.fullmatch(record + '"iso line"', lines[-2]), lines[-2]
    assert re.fullmatch(record + r'"two \\"quoted\\"\\nlines"', lines[-1]), lines[-1]
    assert len(lines) == 5


def _record(fmt: LogFormat, *, escaped: bool, exc: bool = False) -> str:
    record = logging.LogRecord(
        "x", logging.ERROR, "/a/b/src.py", 7, "bad\n\x1b[31m %s", ('q"',), None
    )
    record.created = 1_764_938_516.25  # 2025-12-05 12:41:56.25 UTC
    record.process = 42
    if exc:
        try:
            raise ValueError("inner")
        except ValueError:
            record.exc_info = sys.exc_info()
    return TritonRecord(iso8601=fmt is LogFormat.ISO8601, escaped=escaped).format(record)


def test_records_are_tritons_in_both_formats_escaped_unless_turned_off() -> None:
    escaped = r'"bad\n\u001b[31m q\""'
    assert (
        _record(LogFormat.DEFAULT, escaped=True) == f"E1205 12:41:56.250000 42 src.py:7] {escaped}"
    )
    assert (
        _record(LogFormat.ISO8601, escaped=True) == f"2025-12-05T12:41:56Z E 42 src.py:7] {escaped}"
    )
    raw = _record(LogFormat.DEFAULT, escaped=False)
    assert raw == 'E1205 12:41:56.250000 42 src.py:7] bad\n\x1b[31m q"'


def test_a_traceback_is_part_of_the_escaped_message() -> None:
    line = _record(LogFormat.DEFAULT, escaped=True, exc=True)
    assert "\n" not in line
    message = json.loads(line.split("] ", 1)[1])
    assert message.startswith('bad\n\x1b[31m q"\nTraceback (most recent call last):')
    assert message.endswith("ValueError: inner")
    assert _record(LogFormat.DEFAULT, escaped=False, exc=True).endswith("\nValueError: inner")


def test_tritons_switch_turns_escaping_off_only_at_0() -> None:
    assert escapes_messages({})
    assert not escapes_messages({ESCAPE_ENV: "0"})
    for on in ("1", "false", "off", ""):  # tritonserver 2.51 escapes for each of these
        assert escapes_messages({ESCAPE_ENV: on})


def test_a_relayed_record_passes_as_it_came(tmp_path: Path) -> None:
    log_file = tmp_path / "server.log"
    control = LogControl(LogSettings(file=str(log_file), info=False))
    control.install()
    log = logging.getLogger("thaw.test")
    log.info("own info hidden")
    record = log.makeRecord("thaw.test", logging.INFO, "model.py", 3, "relayed", (), None)
    record.__dict__[RELAYED] = True
    log.handle(record)
    lines = _lines(log_file)
    assert len(lines) == 1 and lines[0].endswith('model.py:3] "relayed"'), lines


def test_a_quieter_floor_holds_at_verbose_level_zero() -> None:
    control = LogControl(LogSettings(), quietest=logging.WARNING)
    control.install()
    assert logging.getLogger().level == logging.WARNING
    control.apply(LogSettings(verbose_level=1))
    assert logging.getLogger().level == logging.DEBUG


def test_a_table_record_is_tritons_table_printer_layout_its_cells_as_tritons() -> None:
    """Quotes as they are (qa/L0_rate_limiter greps `Resource count for "resource1"` in the
    model table), a cell's lines on lines of their own (Triton 2.51's layout of a traceback),
    no line of the table able to pass for a record."""
    rows = [
        ("simple", "1", "READY"),
        ("bad\nI0205 00:00:00.000000 1 x.cc:1] forged", "1", 'x|y "q" \\ \t'),
        ("good", "1", "UNAVAILABLE: Internal: X\n\nAt:\n  m/1/model.py(9): initialize\n"),
    ]
    text = table(("Model", "Version", "Status"), rows)
    lines = text.split("\n")
    assert len(lines) == 11 and lines[0] == lines[2] == lines[10]
    assert re.fullmatch(r"\+(-+\+){3}", lines[0])
    assert lines[1].startswith("| Model ") and lines[3].startswith("| simple ")
    assert lines[4].startswith("| bad ") and '| x|y "q" \\ \\t ' in lines[4]
    assert lines[5].startswith("| I0205 00:00:00.000000 1 x.cc:1] forged |")  # not a record
    assert [line.split("|")[3].strip() for line in lines[6:10]] == [
        "UNAVAILABLE: Internal: X", "", "At:", "m/1/model.py(9): initialize",
    ]  # fmt: skip
    assert all(line[0] in "|+" for line in lines)
    assert len({len(line) for line in lines}) == 1
    record = logging.LogRecord("x", logging.INFO, "/a/app.py", 9, "", (), None)
    record.created, record.process = 1_764_938_516.25, 42
    record.__dict__[TABLE] = text
    for escaped in (True, False):
        formatted = TritonRecord(escaped=escaped).format(record)
        assert formatted == "I1205 12:41:56.250000 42 app.py:9] \n" + text
