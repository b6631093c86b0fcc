"""A replica's standard-error lines as records of `thaw up`'s log: severity and text from both
of the replica's formats, anything else a warning as it is."""

from __future__ import annotations

import logging

import pytest

from activator.scaler.local.replica_log import parse


@pytest.mark.parametrize(
    ("line", "level", "text"),
    [
        (
            "2026-12-02 10:00:00,123 INFO triton_python_backend_utils: hello from execute",
            logging.INFO,
            "triton_python_backend_utils: hello from execute",
        ),
        (
            "2026-12-02 10:00:00,123 WARNING runtime.models.manager: model=m slow load",
            logging.WARNING,
            "runtime.models.manager: model=m slow load",
        ),
        (
            "2026-12-02 10:00:00,5 DEBUG a.b: x: y",
            logging.DEBUG,
            "a.b: x: y",
        ),
        (
            "2026-12-02T10:00:00Z I 4242 host.py:78] hello from execute",
            logging.INFO,
            "host.py:78] hello from execute",
        ),
        ("2026-12-02T10:00:00Z E 7 x.py:1] boom", logging.ERROR, "x.py:1] boom"),
        (
            "Traceback (most recent call last):",
            logging.WARNING,
            "Traceback (most recent call last):",
        ),
        (
            "2026-12-02 10:00:00 INFO no millis",
            logging.WARNING,
            "2026-12-02 10:00:00 INFO no millis",
        ),
    ],
)
def test_each_line_keeps_its_severity_and_drops_the_replicas_own_stamp(
    line: str, level: int, text: str
) -> None:
    assert parse(line) == (level, text)
