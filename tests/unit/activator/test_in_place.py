"""Which changes of a served model `thaw up`'s replicas take in place (activator.fleet.in_place):
Triton's instance update, judged as `thaw serve` judges it, and what the replicas' answers to
the load come to."""

from __future__ import annotations

from activator.fleet.in_place import UpdateOutcome, Updates, updates_in_place
from tritonconfig import parse_config
from tritonconfig.fingerprint import Fingerprint
from tritonconfig.schema import mc

_BASE = """
name: "m"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
_FILES: Fingerprint = (("1/model.py", 100, 20), ("config.pbtxt", 100, 300))


def _config(extra: str = "") -> mc.ModelConfig:
    return parse_config(_BASE + extra, "config.pbtxt")


def _touched_config(files: Fingerprint = _FILES) -> Fingerprint:
    return tuple((p, t + 1, n + 5) if p == "config.pbtxt" else (p, t, n) for p, t, n in files)


def _in_place(before: mc.ModelConfig, after: mc.ModelConfig, **changes: object) -> bool:
    kwargs: dict[str, object] = dict(before_files=_FILES, after_files=_touched_config())
    kwargs.update(changes)
    return updates_in_place(before=before, after=after, **kwargs)  # type: ignore[arg-type]


def test_an_instance_count_change_alone_is_taken_in_place() -> None:
    one = _config("instance_group [ { count: 1 kind: KIND_CPU } ]")
    three = _config("instance_group [ { count: 3 kind: KIND_CPU } ]")
    assert _in_place(one, three)
    assert _in_place(three, one)
    assert _in_place(_config(), three)  # no group before (one per device) -> 3


def test_a_group_renamed_or_regrouped_is_an_instance_update_too() -> None:
    one = _config("instance_group [ { count: 2 kind: KIND_CPU } ]")
    two = _config('instance_group [ { name: "a" count: 1 kind: KIND_CPU }, '
                  '{ name: "b" count: 1 kind: KIND_CPU } ]')  # fmt: skip
    assert _in_place(one, two)


def test_any_other_config_change_replaces_the_replicas() -> None:
    one = _config("instance_group [ { count: 1 kind: KIND_CPU } ]")
    batching = _config("instance_group [ { count: 2 kind: KIND_CPU } ]\ndynamic_batching { }")
    assert not _in_place(one, batching)
    setting = 'parameters { key: "thaw.max_replicas" value { string_value: "2" } }'
    param = _config("instance_group [ { count: 2 kind: KIND_CPU } ]\n" + setting)
    assert not _in_place(one, param)


def test_a_config_rewritten_the_same_or_but_its_version_policy_is_kept_as_it_is() -> None:
    # As Triton's count 0 (read as 1): nothing to add or remove; the replica keeps its instances.
    one = _config("instance_group [ { count: 1 kind: KIND_CPU } ]")
    assert _in_place(one, one)
    policy = _config("instance_group [ { count: 1 kind: KIND_CPU } ]\nversion_policy { all { } }")
    assert _in_place(one, policy)


def test_versions_added_changed_or_dropped_are_taken_in_place() -> None:
    # The replica's load reloads only what changed (runtime.models.version_reuse), as Triton.
    one = _config("instance_group [ { count: 1 kind: KIND_CPU } ]")
    policy = _config('instance_group [ { count: 1 kind: KIND_CPU } ]\n'
                     "version_policy { specific { versions: [ 1, 2 ] } }")  # fmt: skip
    touched = (("1/model.py", 101, 20), ("config.pbtxt", 101, 305))
    assert _in_place(one, one, after_files=touched)
    added = (*_touched_config(), ("2/model.py", 100, 20))
    assert _in_place(one, policy, after_files=added)
    assert _in_place(policy, one, before_files=added)


def test_a_file_of_the_models_own_beside_its_versions_replaces_the_replicas() -> None:
    # Every version imports it: all reload (on Triton too); a new replica loads each once.
    one = _config("instance_group [ { count: 1 kind: KIND_CPU } ]")
    two = _config("instance_group [ { count: 2 kind: KIND_CPU } ]")
    beside = (*_touched_config(), ("util.py", 100, 9))
    assert not _in_place(one, two, after_files=beside)
    assert not _in_place(one, one, after_files=beside)
    not_a_version = (*_touched_config(), ("v2/model.py", 100, 9))
    assert not _in_place(one, one, after_files=not_a_version)


def test_a_config_override_is_compared_by_content_and_file_overrides_never_in_place() -> None:
    one = _config("instance_group [ { count: 1 kind: KIND_CPU } ]")
    two = _config("instance_group [ { count: 2 kind: KIND_CPU } ]")
    mark = ("\0config-override", 1234, 56)  # activator.fleet.repository's row for `config`
    assert _in_place(one, two, after_files=(*_FILES, mark))
    assert _in_place(one, two, before_files=(*_FILES, mark), after_files=_FILES)
    assert not _in_place(one, two, files_overridden=True)


def test_the_replicas_answers_come_to_kept_refused_or_replace() -> None:
    assert Updates().outcome is UpdateOutcome.KEPT  # none up: the new entry is all
    assert Updates(updated=2).outcome is UpdateOutcome.KEPT
    refused = Updates(refused=("load failed for model 'm': Resource count",))
    assert refused.outcome is UpdateOutcome.REFUSED
    assert refused.why == "load failed for model 'm': Resource count"
    assert Updates(updated=1, refused=("no",)).outcome is UpdateOutcome.REPLACE  # they disagree
    assert Updates(updated=1, failed=("timed out",)).outcome is UpdateOutcome.REPLACE
    assert Updates(refused=("no",), failed=("gone",)).outcome is UpdateOutcome.REPLACE
    assert Updates(updated=1).why == ""
