"""A failed load in tritonserver's words: the log line (its QA greps `failed to load 'm' version
1: ...`), a load request's answer and the index row's reason, the version taken from a reason
that names it, as Thaw's reasons do."""

from __future__ import annotations

import pytest

from runtime.errors import RepositoryError
from runtime.models.load_errors import failed_to_load, index_reason, name_load_failure


@pytest.mark.parametrize(
    ("reason", "line"),
    [
        (
            "model 'm' version 1: importing m/1/model.py failed: SyntaxError: nope",
            "failed to load 'm' version 1: importing m/1/model.py failed: SyntaxError: nope",
        ),
        ("config.pbtxt: line 3: bad", "failed to load 'm': config.pbtxt: line 3: bad"),
        ("model 'm' version x: odd", "failed to load 'm': model 'm' version x: odd"),
        ("model 'other' version 2: y", "failed to load 'm': model 'other' version 2: y"),
        ("model 'm' version 3", "failed to load 'm': model 'm' version 3"),
    ],
)
def test_the_version_comes_from_a_reason_that_names_it(reason: str, line: str) -> None:
    assert failed_to_load("m", reason) == line


def test_a_load_request_names_the_failed_version_as_tritonserver_does() -> None:
    """qa/L0_lifecycle (`version 2 is at UNAVAILABLE state: Internal: ...`) and
    L0_trt_error_propagation read the answer this far; the index row's reason is the why."""
    exc = RepositoryError("model 'm' version 2: Internal: ValueError: no\n\nAt:\n  m/2/model.py(3)")
    name_load_failure("m", exc)
    assert exc.message == (
        "load failed for model 'm': version 2 is at UNAVAILABLE state: Internal: ValueError: "
        "no\n\nAt:\n  m/2/model.py(3);\n"
    )
    other = RepositoryError("config.pbtxt: line 3: bad")
    name_load_failure("m", other)
    assert other.message == "load failed for model 'm': config.pbtxt: line 3: bad"
    assert index_reason("m", "model 'm' version 2: Internal: x") == "Internal: x"
    assert index_reason("m", "model 'other' version 2: y") == "model 'other' version 2: y"
