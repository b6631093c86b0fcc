"""The trace extension's records: sampling by rate and count, the files log_frequency asks for,
a replaced setting's records written, Triton's JSON per trace."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.observe.tracing import RequestTimes, RequestTracer
from thawwire.trace_settings import TraceSetting, TraceSettings, parse_trace_update

TIMES = RequestTimes(1, 2, 3, 4, 5, 6, 7)


def _tracer(file: Path, **fields: object) -> RequestTracer:
    setting = TraceSetting(level=frozenset({"TIMESTAMPS"}), rate=1, file=str(file))
    return RequestTracer(TraceSettings(TraceSetting(**{**_fields(setting), **fields})))


def _fields(setting: TraceSetting) -> dict[str, object]:
    return {name: getattr(setting, name) for name in setting.__slots__}


def _ids(path: Path) -> list[str]:
    return [e["request_id"] for e in json.loads(path.read_text()) if "request_id" in e]


def test_every_rate_th_request_until_count_is_used_up(tmp_path: Path) -> None:
    file = tmp_path / "t.json"
    tracer = _tracer(file, rate=3, count=2)
    for i in range(12):
        tracer.record("m", "1", f"r{i}", TIMES)
    assert not file.exists()  # log_frequency 0: written when the server stops
    tracer.close()
    assert _ids(file) == ["r2", "r5"]


def test_count_used_up_with_every_request_sampled_writes_an_indexed_file(tmp_path: Path) -> None:
    file = tmp_path / "t.json"
    tracer = _tracer(file, count=2)
    for i in range(4):
        tracer.record("m", "1", f"r{i}", TIMES)
    assert _ids(Path(f"{file}.0")) == ["r0", "r1"]  # Triton: count reached, all collected


def test_log_frequency_writes_numbered_files_and_close_the_rest(tmp_path: Path) -> None:
    file = tmp_path / "t.json"
    tracer = _tracer(file, log_frequency=2)
    for i in range(5):
        tracer.record("m", "2", f"r{i}", TIMES)
    assert _ids(Path(f"{file}.0")) == ["r0", "r1"] and _ids(Path(f"{file}.1")) == ["r2", "r3"]
    tracer.close()
    assert _ids(Path(f"{file}.2")) == ["r4"]
    entries = json.loads(Path(f"{file}.0").read_text())
    assert entries[0] == {"id": 1, "model_name": "m", "model_version": 2, "request_id": "r0"}
    assert entries[1] == {"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 1}]}
    assert [e["timestamps"][0]["ns"] for e in entries[1:8]] == [1, 2, 3, 4, 5, 6, 7]


def test_a_changed_setting_writes_its_records_and_counts_afresh(tmp_path: Path) -> None:
    file = tmp_path / "t.json"
    tracer = _tracer(file)
    tracer.record("m", "1", "before", TIMES)
    tracer.settings.update("m", parse_trace_update({"trace_rate": "2"}))
    tracer.record("m", "1", "skipped", TIMES)
    tracer.record("m", "1", "after", TIMES)
    tracer.settings.update(None, parse_trace_update({"trace_level": ["OFF"]}))
    tracer.record("n", "1", "off", TIMES)
    tracer.close()
    assert _ids(file) == ["before", "after"]


def test_no_file_or_off_records_nothing(tmp_path: Path) -> None:
    tracer = RequestTracer(TraceSettings(TraceSetting(level=frozenset({"TIMESTAMPS"}))))
    tracer.record("m", "1", "x", TIMES)
    tracer.close()
    off = _tracer(tmp_path / "t.json", level=frozenset())
    off.record("m", "1", "x", TIMES)
    off.close()
    assert list(tmp_path.iterdir()) == []
