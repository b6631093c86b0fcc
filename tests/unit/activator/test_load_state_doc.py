"""Explicit mode's shared load state on Kubernetes, its pure parts
(activator.scaler.kubernetes.load_state_doc): the document, its merge on a conflicting write,
and which re-read an activator adopts, on a clock the test steps."""

from __future__ import annotations

import json

import pytest

from activator.scaler.kubernetes.load_state_doc import (
    ANNOTATION_LOAD_STATE,
    LoadStateDoc,
    LoadStateView,
    apply,
    lease_name,
    parse,
)


def _lease(doc: dict[str, object] | str | None, uid: str = "u1") -> dict[str, object]:
    annotations = (
        {}
        if doc is None
        else {ANNOTATION_LOAD_STATE: doc if isinstance(doc, str) else json.dumps(doc)}
    )
    return {"metadata": {"name": "x-load-state", "uid": uid, "annotations": annotations}}


def test_no_lease_or_no_annotation_is_an_empty_document() -> None:
    assert parse(None) == LoadStateDoc()
    assert parse(_lease(None)) == LoadStateDoc(uid="u1")


def test_a_document_round_trips_through_its_annotation() -> None:
    doc = LoadStateDoc(3, {"b": "unloaded", "a": "loaded", "n": "named", "e": "down"}, "u1")
    assert parse(_lease(doc.text())) == doc
    assert json.loads(doc.text()) == {
        "generation": 3,
        "models": {"a": "loaded", "b": "unloaded", "e": "down", "n": "named"},
    }


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        "[]",
        {"generation": -1, "models": {}},
        {"generation": True, "models": {}},
        {"generation": 1, "models": []},
        {"generation": 1, "models": {"m": "ready"}},
    ],
)
def test_a_hand_written_wrong_annotation_is_refused_saying_so(bad: object) -> None:
    with pytest.raises(ValueError, match=ANNOTATION_LOAD_STATE):
        parse(_lease(bad))  # type: ignore[arg-type]


def test_apply_writes_the_change_over_what_was_read_one_generation_on() -> None:
    read = LoadStateDoc(4, {"a": "loaded", "b": "loaded"}, "u1")
    assert apply(read, {"b": "unloaded", "c": "loaded"}) == LoadStateDoc(
        5, {"a": "loaded", "b": "unloaded", "c": "loaded"}, "u1"
    )
    with pytest.raises(ValueError):
        apply(read, {"a": "ready"})


def test_two_writes_at_once_lose_neither_change() -> None:
    # A and B read generation 1; A writes first; B's write is refused (409), B reads A's
    # document and applies its change to that: both changes stand, B's the later.
    base = LoadStateDoc(1, {"m": "loaded"}, "u1")
    by_a = apply(base, {"m": "unloaded"})
    by_b = apply(by_a, {"n": "loaded"})  # B's retry, on what A wrote
    assert by_b == LoadStateDoc(3, {"m": "unloaded", "n": "loaded"}, "u1")


def test_the_view_adopts_newer_documents_and_says_what_changed() -> None:
    view, now = LoadStateView(), 100.0
    assert view.age_s(now) is None
    assert view.offer(LoadStateDoc(1, {"m": "loaded"}, "u1"), now) == {"m": "loaded"}
    now += 0.25
    assert view.offer(LoadStateDoc(1, {"m": "loaded"}, "u1"), now) == {}  # re-read, unchanged
    assert view.age_s(now + 1.0) == pytest.approx(1.0)
    now += 0.25
    changed = view.offer(LoadStateDoc(2, {"m": "unloaded", "n": "loaded"}, "u1"), now)
    assert changed == {"m": "unloaded", "n": "loaded"}


def test_a_re_read_that_raced_this_activators_own_write_does_not_undo_it() -> None:
    view, now = LoadStateView(), 10.0
    view.offer(LoadStateDoc(1, {"m": "loaded"}, "u1"), now)
    # A re-read starts (it will see generation 1) ... this activator's unload writes 2 ...
    view.offer(LoadStateDoc(2, {"m": "unloaded"}, "u1"), now + 0.1)
    # ... and the re-read's answer arrives last: not adopted.
    assert view.offer(LoadStateDoc(1, {"m": "loaded"}, "u1"), now + 0.2) is None
    assert view.doc.models == {"m": "unloaded"}


def test_an_unreachable_api_keeps_the_last_known_state_in_force() -> None:
    view, now = LoadStateView(), 10.0
    view.offer(LoadStateDoc(2, {"m": "unloaded"}, "u1"), now)
    view.failed(now + 1)
    view.failed(now + 2)
    assert view.failing_since == now + 1
    assert view.doc.models == {"m": "unloaded"}
    assert view.age_s(now + 3) == pytest.approx(3)
    view.offer(LoadStateDoc(2, {"m": "unloaded"}, "u1"), now + 4)  # it answers again
    assert view.failing_since is None and view.age_s(now + 4) == 0


def test_a_lease_gone_missing_keeps_the_state_and_one_made_again_replaces_it() -> None:
    view = LoadStateView()
    view.offer(LoadStateDoc(5, {"m": "unloaded"}, "u1"), 1.0)
    assert view.offer(LoadStateDoc(), 2.0) is None  # deleted: the last known stays
    assert view.doc.models == {"m": "unloaded"}
    # Made again (a new uid) by the next write: adopted whatever its generation.
    assert view.offer(LoadStateDoc(1, {"n": "loaded"}, "u2"), 3.0) == {"n": "loaded"}
    assert view.doc == LoadStateDoc(1, {"n": "loaded"}, "u2")


def test_the_lease_is_named_after_the_scaling_lease_and_stays_a_valid_name() -> None:
    assert lease_name("thaw-activator-leader") == "thaw-activator-leader-load-state"
    long = lease_name("x" * 253)
    assert len(long) == 253 and long.endswith("-load-state")
