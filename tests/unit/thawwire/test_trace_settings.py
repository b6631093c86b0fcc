"""The trace extension's settings: a client's update checked as Triton 2.51 checks it (and
stricter where Triton reads loosely), and model settings over global ones over the operator's,
as Triton's TraceManager merges them (qa/L0_trace's clear-settings story)."""

from __future__ import annotations

import pytest

from thawwire.log_settings import SettingsRefused
from thawwire.trace_flags import TraceFlags, trace_defaults
from thawwire.trace_settings import TraceSetting, TraceSettings, parse_trace_update

OPERATOR = TraceSetting(level=frozenset({"TIMESTAMPS"}), rate=1, file="global_unittest.log")


def _update(settings: TraceSettings, model: str | None, **doc: object) -> TraceSetting:
    return settings.update(model, parse_trace_update(doc))


def test_a_model_without_settings_follows_the_global_ones() -> None:
    settings = TraceSettings(OPERATOR)
    assert settings.setting("simple") == settings.setting() == OPERATOR
    _update(settings, None, trace_level=["TIMESTAMPS", "TENSORS"])
    assert settings.setting("simple").level == {"TIMESTAMPS", "TENSORS"}


def test_clearing_falls_back_one_level_as_in_l0_trace() -> None:
    settings = TraceSettings(OPERATOR)
    _update(settings, "simple", trace_rate="12", log_frequency="34")
    _update(settings, None, trace_rate="56", trace_count="78", trace_level=["OFF"])
    cleared = _update(settings, None, trace_rate=None, trace_count=None)
    assert cleared.as_json() == {
        "trace_file": "global_unittest.log",
        "trace_level": ["OFF"],
        "trace_rate": "1",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_mode": "triton",
    }
    model = settings.setting("simple")
    assert (model.level, model.rate, model.count, model.log_frequency) == (frozenset(), 12, -1, 34)
    after = _update(settings, "simple", trace_rate=None, trace_level=None)
    assert (after.rate, after.log_frequency) == (1, 34)
    assert settings.overridden() == ("simple",)
    _update(settings, "simple", log_frequency=None)
    assert settings.overridden() == ()  # nothing of its own: it follows the global setting


def test_grpc_lists_clear_when_empty_and_hold_one_value() -> None:
    update = parse_trace_update({"trace_rate": [], "trace_count": ["5"], "trace_level": []})
    assert update.values == {"rate": None, "count": 5, "level": None}
    with pytest.raises(SettingsRefused, match="expect only 1 value for 'trace_rate'"):
        parse_trace_update({"trace_rate": ["1", "2"]})


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"trace_level": ["OFF", "TIMESTAMPS"]}, "Expect only one trace level 'OFF'"),
        ({"trace_level": ["LOUD"]}, "unknown trace level 'LOUD'"),
        ({"trace_level": "TIMESTAMPS"}, "must be a list of level names"),
        ({"trace_rate": "12abc"}, "Unable to parse 'trace_rate', got: 12abc"),
        ({"trace_rate": "-1"}, r"value is out of range \[ 0, 4294967295 \]"),
        ({"trace_rate": True}, "Unable to parse 'trace_rate'"),
        ({"trace_rate": 1.5}, "Unable to parse 'trace_rate'"),
        ({"trace_count": "-2"}, r"out of range \[ -1, 2147483647 \]"),
        ({"log_frequency": "99999999999999999999999"}, "Unable to parse 'log_frequency'"),
        ({"trace_rates": "1"}, "unknown trace setting 'trace_rates'"),
    ],
)
def test_bad_updates_are_refused_in_triton_words(doc: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsRefused, match=message) as info:
        parse_trace_update(doc)
    assert not info.value.unsupported


@pytest.mark.parametrize("file", ["../../etc/passwd", "/tmp/x", None, ""])
def test_no_client_chooses_the_trace_file(file: object) -> None:
    with pytest.raises(SettingsRefused, match="trace file location can not be updated") as info:
        parse_trace_update({"trace_file": file, "trace_rate": "2"})
    assert info.value.unsupported  # Triton's UNSUPPORTED: 501 / UNIMPLEMENTED


def test_a_setting_that_cannot_trace_is_refused_and_nothing_changes() -> None:
    settings = TraceSettings(TraceSetting())  # no file, OFF
    with pytest.raises(SettingsRefused, match="invalid trace setting :trace file name is not"):
        _update(settings, None, trace_level=["TIMESTAMPS"])
    assert settings.setting() == TraceSetting()
    settings = TraceSettings(OPERATOR)
    with pytest.raises(SettingsRefused, match="sample rate must be non-zero"):
        _update(settings, "simple", trace_rate="0")
    assert settings.overridden() == ()
    assert _update(settings, None, trace_level=["OFF"], trace_rate="0").rate == 0  # off: allowed


def test_the_operator_flags_as_tritonserver_reads_them() -> None:
    flags = TraceFlags(
        config=("triton,file=t.log", "level=TIMESTAMPS", "level=TENSORS", "rate=6", "count=3",
                "triton,log-frequency=2", "mode=triton"),
        levels=("min",), rate=100, file="old.log",
    )  # fmt: skip
    assert trace_defaults(flags) == TraceSetting(
        level=frozenset({"TIMESTAMPS", "TENSORS"}), rate=6, count=3, log_frequency=2, file="t.log"
    )
    assert trace_defaults(TraceFlags(config=("level=TIMESTAMPS", "level=OFF"))).level == set()
    assert trace_defaults(TraceFlags()) == TraceSetting(rate=1000, count=-1)
    for bad, message in (
        ("opentelemetry,url=x", "'opentelemetry' is not supported"),
        (",file=x", "No trace mode specified"),
        ("level", "option format is"),
        ("level=LOUD", "invalid value for trace level option: LOUD"),
        ("rate=x", "not an integer"),
        ("colour=red", "unknown setting"),
    ):
        with pytest.raises(ValueError, match=message):
            trace_defaults(TraceFlags(config=(bad,)))


def test_a_setting_as_the_flags_that_give_it_back() -> None:
    from thawwire.trace_flags import as_flags

    setting = TraceSetting(
        level=frozenset({"TIMESTAMPS", "TENSORS"}), rate=3, count=9, log_frequency=2, file="x"
    )
    flags = as_flags(setting, "/tmp/t.json.replica-1")
    configs = tuple(f.removeprefix("--trace-config=") for f in flags)
    assert trace_defaults(TraceFlags(config=configs)) == TraceSetting(
        level=setting.level, rate=3, count=9, log_frequency=2, file="/tmp/t.json.replica-1"
    )
    off = as_flags(TraceSetting(), "f")
    assert "--trace-config=level=OFF" in off


def test_maybe_tracing_follows_every_level_and_needs_a_file() -> None:
    assert not TraceSettings(TraceSetting(level=frozenset({"TIMESTAMPS"}))).maybe_tracing
    settings = TraceSettings(TraceSetting(file="t.json"))
    assert not settings.maybe_tracing
    settings.update("m", parse_trace_update({"trace_level": ["TIMESTAMPS"]}))
    assert settings.maybe_tracing
    settings.update("m", parse_trace_update({"trace_level": None}))
    assert not settings.maybe_tracing
