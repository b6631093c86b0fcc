"""Run unittest test ids as Triton's QA does (plain unittest), writing one JSON row per test.

    python -m tests.conformance.unittest_json --list MODULE
    python -m tests.conformance.unittest_json --out FILE TEST_ID ...

Run from the directory holding the test module (Triton's tests import `../common`). Triton's
`TestResultCollector` needs unittest's own result object, which is why these files are not run
under pytest.
"""

from __future__ import annotations

import argparse
import json
import sys
import unittest
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

_ExcInfo = tuple[type[BaseException], BaseException, TracebackType] | tuple[None, None, None]


def _flatten(suite: unittest.TestSuite | unittest.TestCase) -> Iterator[unittest.TestCase]:
    if isinstance(suite, unittest.TestCase):
        yield suite
        return
    for item in suite:
        yield from _flatten(item)


class _Rows(unittest.TestResult):
    """Keeps one outcome per test id (a failing subtest fails its test); unittest's names."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}

    def _set(self, test: unittest.TestCase, outcome: str, detail: str = "") -> None:
        row = self.rows.setdefault(test.id(), {"outcome": "passed", "detail": ""})
        if row["outcome"] == "passed":
            row["outcome"], row["detail"] = outcome, detail

    def _text(self, err: _ExcInfo) -> str:
        exc = err[1]
        return f"{type(exc).__name__}: {exc}" if exc is not None else ""

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self._set(test, "passed")

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        self._set(test, "failed", self._text(err))

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        super().addError(test, err)
        self._set(test, "error", self._text(err))

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self._set(test, "skipped", reason)

    def addSubTest(self, test: unittest.TestCase, subtest: Any, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            outcome = "failed" if issubclass(err[0], test.failureException) else "error"
            self._set(test, outcome, f"{subtest._subDescription()}: {self._text(err)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--list", metavar="MODULE")
    parser.add_argument("--out", type=Path)
    parser.add_argument("ids", nargs="*")
    args = parser.parse_args(argv)
    sys.path.insert(0, ".")
    loader = unittest.TestLoader()
    if args.list:
        for test in _flatten(loader.loadTestsFromName(args.list)):
            print(test.id())
        return 0
    result = _Rows()
    loader.loadTestsFromNames(args.ids).run(result)
    for test_id in args.ids:  # a test that never reported (setUpClass failed) is an error
        result.rows.setdefault(test_id, {"outcome": "error", "detail": "did not run"})
    for error_test, text in result.errors:
        if not isinstance(error_test, unittest.TestCase):  # a class or module fixture failed
            result.rows[str(error_test)] = {"outcome": "error", "detail": text.splitlines()[-1]}
    args.out.write_text(json.dumps(result.rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
