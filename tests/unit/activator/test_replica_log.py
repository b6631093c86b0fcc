"""A replica's standard-error lines as records of `thaw up`'s log: severity, process id, file,
line and message (unescaped) from both of tritonserver's record formats, anything else a
warning as it is."""

from __future__ import annotations

import logging

import pytest

from activator.scaler.local.replica_log import ReplicaLine, parse


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'I1205 12:21:56.976943 5339 model.py:6] "hello from execute"',
            ReplicaLine(logging.INFO, "hello from execute", 5339, "model.py", 6),
        ),
        (
            'W1205 12:21:56.976943 7 manager.py:120] "model=m slow \\"load\\"\\nnext"',
            ReplicaLine(logging.WARNING, 'model=m slow "load"\nnext', 7, "manager.py", 120),
        ),
        (
            '2026-12-02T10:00:00Z I 4242 host.py:78] "hello from execute"',
            ReplicaLine(logging.INFO, "hello from execute", 4242, "host.py", 78),
        ),
        (
            '2026-12-02T10:00:00Z E 7 x.py:1] "boom"',
            ReplicaLine(logging.ERROR, "boom", 7, "x.py", 1),
        ),
        (
            'E1205 12:21:56.976943 7 x.py:1] "not one string" "two"',
            ReplicaLine(logging.ERROR, '"not one string" "two"', 7, "x.py", 1),
        ),
        (
            "Traceback (most recent call last):",
            ReplicaLine(logging.WARNING, "Traceback (most recent call last):"),
        ),
        (
            "I1205 12:21:56 7 x.py:1] no micros",
            ReplicaLine(logging.WARNING, "I1205 12:21:56 7 x.py:1] no micros"),
        ),
    ],
)
def test_each_record_keeps_its_severity_source_and_message(
    text: str, expected: ReplicaLine
) -> None:
    assert parse(text) == expected


def test_an_unescaped_replicas_message_is_kept_as_it_is() -> None:
    line = parse('I1205 12:21:56.976943 7 x.py:1] "quoted"', escaped=False)
    assert line.message == '"quoted"'
