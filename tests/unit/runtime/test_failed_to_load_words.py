"""A failed load's log line in tritonserver's words (its QA greps `failed to load 'm' version
1: ...`): the version taken from a reason that names it, as Thaw's reasons do."""

from __future__ import annotations

import pytest

from runtime.models.model_loading import failed_to_load


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
