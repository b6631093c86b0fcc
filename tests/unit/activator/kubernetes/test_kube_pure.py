"""The Kubernetes backend's pure parts: label values, the claim patch and candidates, the
back-off, the Lease policy (stepped clock), peer-load bookkeeping, report parsing, the
collection pass, and the pool selector flag."""

from __future__ import annotations

import functools
import random

import pytest

from activator.scaler.backend import PeerLoad
from activator.scaler.kube_config import parse_selector
from activator.scaler.kubernetes.backoff import Backoff, retryable
from activator.scaler.kubernetes.follower_start import FOLLOW_POLL_S, FollowAction, poll_s
from activator.scaler.kubernetes.follower_start import step as follow_step
from activator.scaler.kubernetes.leader_lease import (
    LeaseAction,
    LeaseObserver,
    LeaseRecord,
    lease_body,
    renew_deadline_s,
)
from activator.scaler.kubernetes.model_labels import is_label_value, label_value
from activator.scaler.kubernetes.peer_load import LeaderTotals, PeerTable
from activator.scaler.kubernetes.peer_reports import parse_report
from activator.scaler.kubernetes.pod_claim import (
    candidates,
    claim_patch,
    model_pod,
    serving_patch,
    utc_now_text,
)
from activator.scaler.kubernetes.pod_collector import Collect, PodCollector
from activator.scaler.kubernetes.pod_state import (
    PodState,
    cannot_start,
    grpc_address,
    runtime_url,
    state_of,
)


def _pod(name: str, *, ready: bool = True, ip: str | None = "127.0.0.9", **meta: object) -> dict:
    status: dict = {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": {"name": name, "resourceVersion": "7", **meta}, "status": status}


# ---- model names as label values --------------------------------------------------------


@pytest.mark.parametrize("name", ["resnet50", "bert.v2", "A-1_b"])
def test_a_name_that_is_a_label_value_is_its_own_label(name: str) -> None:
    assert label_value(name) == name


@pytest.mark.parametrize("name", ["_private", "ends-", "x" * 64, "trail.", "_"])
def test_other_names_map_to_distinct_valid_labels(name: str) -> None:
    label = label_value(name)
    assert is_label_value(label) and label != name and len(label) <= 63
    assert label_value(name) == label  # stable across activators and restarts
    assert label_value(name + "y") != label


def test_names_differing_only_in_mapped_characters_do_not_share_a_label() -> None:
    assert label_value("_a") != label_value("-a")  # both read "a"; the digest tells them apart
    assert label_value("a_" * 40) != label_value("a_" * 40 + "b")
    with pytest.raises(ValueError):
        label_value("")


# ---- the claim ----------------------------------------------------------------------------


def test_the_claim_patch_carries_the_seen_version_and_the_serving_mark_leaves_the_pool() -> None:
    pod = _pod("pool-abc", labels={"thaw.dev/pool": "p", "keep": "1"})
    patch = claim_patch(
        pod,
        model="_m",
        label=label_value("_m"),
        fleet="thaw",
        activator="a-1",
        now="2026-01-01T00:00:00.000001Z",
    )
    meta = patch["metadata"]
    assert meta["resourceVersion"] == "7"
    # The pool's labels stay while it loads: its ReplicaSet starts no replacement yet.
    assert meta["labels"] == {"thaw.dev/fleet": "thaw", "thaw.dev/model": label_value("_m")}
    assert meta["annotations"]["thaw.dev/model"] == "_m"
    assert meta["annotations"]["thaw.dev/state"] == PodState.LOADING
    assert meta["annotations"]["controller.kubernetes.io/pod-deletion-cost"] == "1000000"
    owners = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "p", "uid": "u"}]
    serving = serving_patch(pool_keys=["thaw.dev/pool"], owners=owners)["metadata"]
    assert serving == {
        "annotations": {"thaw.dev/state": "serving"},
        "labels": {"thaw.dev/pool": None},
        "ownerReferences": owners,
    }


def test_candidates_are_ready_pods_first_never_deleting_or_addressless() -> None:
    pods = [
        _pod("ready-1"),
        _pod("ready-2"),
        _pod("starting", ready=False),
        _pod("no-ip", ip=None),
        _pod("going", deletionTimestamp="2026-01-01T00:00:00Z"),
        _pod("claimed", annotations={"thaw.dev/model": "m"}),  # loading, still in the pool
    ]
    ready, maybe = candidates(pods, random.Random(1))
    assert sorted(p["metadata"]["name"] for p in ready) == ["ready-1", "ready-2"]
    assert [p["metadata"]["name"] for p in maybe] == ["starting"]


def test_a_model_pod_is_the_pool_template_without_the_pool_labels() -> None:
    ports = [{"name": "http", "containerPort": 9000}]
    template = {
        "metadata": {"labels": {"thaw.dev/pool": "p", "app": "rt"}, "annotations": {"x": "1"}},
        "spec": {"containers": [{"name": "runtime", "ports": ports}]},
    }
    pod = model_pod(template, model="M_1", label="M_1", fleet="thaw", activator="a",
                    pool_keys=["thaw.dev/pool"], now=utc_now_text())  # fmt: skip
    assert pod["metadata"]["labels"] == {
        "app": "rt",
        "thaw.dev/fleet": "thaw",
        "thaw.dev/model": "M_1",
    }
    assert pod["metadata"]["generateName"] == "thaw-m-1-"
    assert pod["metadata"]["annotations"]["x"] == "1"
    assert runtime_url({**pod, "status": {"podIP": "10.0.0.1"}}) == "http://10.0.0.1:9000"
    assert template["metadata"]["labels"]["thaw.dev/pool"] == "p"  # not mutated


def test_a_pods_grpc_address_is_its_ip_and_grpc_port_as_its_http_url_is_made() -> None:
    ports = [{"name": "http", "containerPort": 9000}, {"name": "grpc", "containerPort": 9001}]
    pod = {"spec": {"containers": [{"name": "runtime", "ports": ports}]},
           "status": {"podIP": "10.0.0.1"}}  # fmt: skip
    assert grpc_address(pod) == "10.0.0.1:9001"  # the container port named `grpc`
    assert grpc_address(pod, 7001) == "10.0.0.1:7001"  # a port given wins (--runtime-grpc-port)
    http_only = {**pod, "spec": {"containers": [{"ports": ports[:1]}]}}
    assert grpc_address(http_only) == "10.0.0.1:8001"  # `thaw serve --port 8000`'s gRPC port
    assert runtime_url(http_only) == "http://10.0.0.1:9000"
    v6 = {**pod, "status": {"podIP": "fd00::7"}}
    assert grpc_address(v6) == "[fd00::7]:9001" and runtime_url(v6) == "http://[fd00::7]:9000"
    assert grpc_address({**pod, "status": {}}) is None  # no IP yet: no address


def test_a_container_stuck_waiting_cannot_start() -> None:
    pod = _pod("p")
    pod["status"]["containerStatuses"] = [
        {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}}
    ]
    assert cannot_start(pod) == "ImagePullBackOff: no such image"
    pod["status"]["containerStatuses"] = [{"state": {"waiting": {"reason": "ContainerCreating"}}}]
    assert cannot_start(pod) is None
    assert state_of(_pod("q", annotations={"thaw.dev/state": "bogus"})) is None


# ---- back-off -------------------------------------------------------------------------------


def test_backoff_doubles_up_to_its_cap_and_honours_retry_after() -> None:
    backoff, rng = Backoff(0.1, 1.0), random.Random(3)
    for attempt in range(1, 10):
        delay = backoff.delay(attempt, rng)
        assert 0.05 <= delay <= min(1.0, 0.1 * 2 ** (attempt - 1))
    assert backoff.delay(1, rng, retry_after_s=4) == 4
    assert [s for s in (0, 400, 403, 404, 409, 410, 422, 429, 500, 503) if retryable(s)] == [
        0,
        429,
        500,
        503,
    ]


# ---- the Lease policy, a stepped-clock story -------------------------------------------------


def _record(holder: str, renew: str, transitions: int = 0, duration: int = 10) -> LeaseRecord:
    body = lease_body("l", holder=holder, duration_s=duration, transitions=transitions,
                      acquire_time=None, peer_url="http://x:1", resource_version="5")  # fmt: skip
    body["spec"]["renewTime"] = renew
    return LeaseRecord.from_object(body)


def test_lease_story_create_follow_take_over_after_a_quiet_lease_and_renew() -> None:
    me = LeaseObserver("b")
    me.observe(None, now=0)
    assert me.decide(0) is LeaseAction.CREATE
    me.observe(_record("a", "t1"), now=1)
    assert me.decide(1) is LeaseAction.FOLLOW
    me.observe(_record("a", "t2"), now=9)  # a renewed: the clock starts again
    assert me.decide(18.9) is LeaseAction.FOLLOW
    me.observe(_record("a", "t2"), now=19)  # unchanged for a whole lease duration
    assert me.decide(19) is LeaseAction.ACQUIRE
    me.observe(_record("", "t3"), now=20)  # released: take it at once
    assert me.decide(20) is LeaseAction.ACQUIRE
    me.observe(_record("b", "t4", transitions=1), now=21)
    assert me.decide(21) is LeaseAction.RENEW
    assert renew_deadline_s(15) < 15  # a failing leader steps down before anyone takes over


def test_lease_times_are_microtime_with_the_fraction_kept() -> None:
    body = lease_body("l", holder="a", duration_s=15, transitions=0, acquire_time=None,
                      peer_url=None, resource_version=None)  # fmt: skip
    renew = body["spec"]["renewTime"]
    assert renew.endswith("Z") and len(renew.split(".")[1]) == 7  # 6 digits + Z
    assert "resourceVersion" not in body["metadata"]


# ---- peer load ---------------------------------------------------------------------------------


def test_the_leader_sums_live_reports_and_says_when_demand_appears_elsewhere() -> None:
    table = PeerTable(ttl_s=2)
    assert table.update("f1", {"m": PeerLoad(0.0, 0)}, now=0) == []
    assert table.update("f1", {"m": PeerLoad(1.5, 3)}, now=1) == ["m"]
    assert table.update("f2", {"m": PeerLoad(0.5, 1)}, now=1) == []  # already there
    assert table.others("m", now=1) == PeerLoad(2.0, 4)
    assert table.others("m", now=1, exclude="f1") == PeerLoad(0.5, 1)
    assert table.live_peers(now=1) == 2
    assert table.others("m", now=3.5) == PeerLoad()  # both stale: a dead activator fades out


def test_an_unloaded_model_is_dropped_from_every_stored_report() -> None:
    table = PeerTable(ttl_s=2)
    table.update("f1", {"m": PeerLoad(1.0, 1), "n": PeerLoad(2.0, 2)}, now=0)
    table.update("f2", {"m": PeerLoad(0.5, 1)}, now=0)
    table.forget("m")
    assert (table.others("m", now=1), table.others("n", now=1)) == (PeerLoad(), PeerLoad(2.0, 2))
    assert table.update("f2", {"m": PeerLoad(0.5, 1)}, now=1) == ["m"]  # reported afresh
    assert table.live_peers(now=1) == 2


def test_a_follower_sees_the_total_less_its_own_part_until_it_is_stale() -> None:
    totals = LeaderTotals(ttl_s=2)
    assert totals.others("m", now=0) == PeerLoad()
    totals.accept({"m": PeerLoad(5.0, 7)}, {"m": PeerLoad(2.0, 3)}, now=1)
    assert totals.others("m", now=2) == PeerLoad(3.0, 4)
    assert totals.others("m", now=3.5) == PeerLoad()


@pytest.mark.parametrize(
    ("report", "words"),
    [
        ([], "JSON object"),
        ({"activator": "", "models": {}}, "`activator`"),
        ({"activator": "a", "models": []}, "`models`"),
        ({"activator": "a", "models": {"m": {"mean": -1, "current": 0}}}, "mean"),
        ({"activator": "a", "models": {"m": {"mean": 1, "current": 1.5}}}, "current"),
        ({"activator": "a", "models": {"m": {"mean": True, "current": 1}}}, "mean"),
        ({"activator": "a", "models": {"m": {"mean": 1e300, "current": 1}}}, "mean"),
    ],
)
def test_a_bad_peer_report_is_refused_with_the_reason(report: object, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_report(report, frozenset({"m"}))


def test_a_report_keeps_known_models_only() -> None:
    report = {"activator": "a", "models": {"m": {"mean": 1, "current": 2}, "other": 5}}
    assert parse_report(report, frozenset({"m"})) == ("a", {"m": PeerLoad(1.0, 2)})


# ---- the collection pass --------------------------------------------------------------------


def test_collection_takes_finished_unknown_and_long_unowned_pods_only() -> None:
    collector = PodCollector({"m"}, orphan_grace_s=10)
    serving = {"thaw.dev/model": "m", "thaw.dev/state": "serving"}
    finished = _pod("done", annotations=serving)
    finished["status"]["phase"] = "Failed"
    pods = [
        _pod("mine", annotations=serving),
        _pod("orphan", annotations=serving),
        _pod("stranger", annotations={"thaw.dev/model": "gone-model"}),
        _pod("leaving", annotations=serving, deletionTimestamp="x"),
        finished,
    ]
    first = collector.sweep(pods, owned={"mine"}, now=0)
    assert first == [Collect("stranger", "unknown_model"), Collect("done", "finished")]
    assert collector.sweep(pods, owned={"mine"}, now=9.9)[-1:] != [Collect("orphan", "orphaned")]
    assert Collect("orphan", "orphaned") in collector.sweep(pods, owned={"mine"}, now=10)
    # Owned again in time: its clock starts over.
    collector.sweep(pods, owned={"mine", "orphan"}, now=11)
    assert Collect("orphan", "orphaned") not in collector.sweep(pods, owned={"mine"}, now=20)


# ---- the pool selector flag ------------------------------------------------------------------


def test_the_pool_selector_is_equality_terms_only() -> None:
    assert parse_selector("thaw.dev/pool=warm, tier==gpu") == (
        ("thaw.dev/pool", "warm"),
        ("tier", "gpu"),
    )
    for bad in ("", "a", "a!=b", "a in (b)", "=b"):
        with pytest.raises(ValueError):
            parse_selector(bad)


def test_a_followers_start_waits_withdraws_or_fails_as_the_rules_say() -> None:
    look = functools.partial(
        follow_step, role_changed=False, claimed=0, demand=1, attached=0, now=0.0, deadline=60.0
    )
    assert look().action is FollowAction.WAIT  # a request waits; the leader is starting one
    assert look(role_changed=True).action is FollowAction.WITHDRAW
    assert look(role_changed=True, claimed=1).action is FollowAction.WITHDRAW
    assert look(demand=0).action is FollowAction.WITHDRAW  # an orphan: nothing asks for it
    # A pod the leader claimed satisfies it, past the deadline and whatever the demand.
    assert look(claimed=1, now=61.0).action is FollowAction.WAIT
    assert look(claimed=1, demand=0).action is FollowAction.WAIT
    # Past the deadline: already routing to the model's pods is enough; else a real failure.
    assert look(attached=1, now=60.0).action is FollowAction.WITHDRAW
    failed = look(now=60.0)
    assert failed.action is FollowAction.FAIL and "did not start one" in failed.reason


def test_a_follower_probes_a_loading_pod_often_at_first_then_every_quarter_second() -> None:
    assert poll_s(5.0, loading=0) == FOLLOW_POLL_S  # nothing loading: its role, every 0.1 s
    assert poll_s(0.0, loading=1) == 0.01
    assert poll_s(0.8, loading=1) == pytest.approx(0.1)
    assert poll_s(60.0, loading=2) == pytest.approx(0.25)
