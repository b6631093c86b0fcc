"""What changed between two reads of the repository, and when the poll reads it again."""

from __future__ import annotations

import pytest

from activator.fleet.rescan import Change, ModelChange, PollSchedule, compare, compare_one

_V1 = (("1/model.onnx", 100, 10), ("config.pbtxt", 100, 50))
_V1_EDITED = (("1/model.onnx", 100, 10), ("config.pbtxt", 200, 51))
_V1_V2 = (*_V1, ("2/model.onnx", 300, 10))


def test_a_model_directory_dropped_in_is_added_one_removed_is_removed() -> None:
    changes = compare({"gone": _V1, "kept": _V1}, {"kept": _V1, "new": _V1})
    assert changes == (
        ModelChange("gone", Change.REMOVED),
        ModelChange("kept", Change.UNCHANGED),
        ModelChange("new", Change.ADDED),
    )


def test_a_new_version_directory_or_an_edited_config_is_a_change() -> None:
    assert compare_one(_V1, _V1_V2) is Change.CHANGED
    assert compare_one(_V1, _V1_EDITED) is Change.CHANGED
    assert compare_one(_V1_V2, _V1) is Change.CHANGED  # a version directory deleted
    assert compare_one(_V1, _V1) is Change.UNCHANGED


def test_a_model_never_known_and_still_absent_is_no_change() -> None:
    assert compare_one(None, None) is Change.UNCHANGED
    assert compare_one(None, ()) is Change.ADDED  # an empty directory is a (bad) model
    assert compare({}, {}) == ()


def test_the_poll_is_due_an_interval_after_the_last_read_ended() -> None:
    schedule = PollSchedule(15.0, now=100.0)
    assert not schedule.due(114.9)
    assert schedule.wait_s(105.0) == pytest.approx(10.0)
    assert schedule.due(115.0)
    # A slow read (ended at 140): the next one waits a whole interval, never stacks up.
    schedule.done(140.0)
    assert not schedule.due(150.0)
    assert schedule.wait_s(150.0) == pytest.approx(5.0)
    assert schedule.due(155.0)
    assert schedule.wait_s(160.0) == 0.0


def test_the_poll_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="`interval_s` = 0"):
        PollSchedule(0.0, now=0.0)
