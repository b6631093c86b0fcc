"""Watches against the fake API server through kubernetes-asyncio's `Watch`: ordering from a
list's resourceVersion, selector transitions, bookmarks, timeouts, and 410 on a compacted or
overflowed history (including how the client's `Watch` reacts to it)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client import ApiException

from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_manifests import pod, python_container
from tests.fakes.loop import HUNG_AFTER_S

NS = "default"


async def _collect(stream: watch.Watch, count: int) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of the next `count` events, then stop the watch."""
    seen = []
    async for event in stream:
        meta = event["raw_object"]["metadata"]
        seen.append((event["type"], meta.get("name", ""), meta["resourceVersion"]))
        if len(seen) == count:
            stream.stop()
            break
    return seen


async def test_watch_from_list_version_sees_every_change_in_order(
    kube_api: client.ApiClient,
) -> None:
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_pod(NS, pod("before", python_container("pass")))
    listed = await core.list_namespaced_pod(NS)
    a = await core.create_namespaced_pod(NS, pod("a", python_container("pass")))
    b = await core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"x": "1"}}})
    c = await core.delete_namespaced_pod("a", NS)
    async with watch.Watch() as stream:
        seen = await _collect(
            stream.stream(
                core.list_namespaced_pod,
                NS,
                resource_version=listed.metadata.resource_version,
                timeout_seconds=5,
            ),
            3,
        )
    assert seen == [
        ("ADDED", "a", a.metadata.resource_version),
        ("MODIFIED", "a", b.metadata.resource_version),
        ("DELETED", "a", c.metadata.resource_version),
    ]
    assert int(c.metadata.resource_version) > int(b.metadata.resource_version)


async def test_watch_without_version_starts_with_the_current_state(
    kube_api: client.ApiClient,
) -> None:
    core = client.CoreV1Api(kube_api)
    for name in ("a", "b"):
        await core.create_namespaced_pod(NS, pod(name, python_container("pass")))
    async with watch.Watch() as stream:
        iterator = stream.stream(core.list_namespaced_pod, NS, timeout_seconds=5)
        first = await _collect(iterator, 2)
    assert [(kind, name) for kind, name, _ in first] == [("ADDED", "a"), ("ADDED", "b")]


async def test_watch_changes_arrive_live(kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    listed = await core.list_namespaced_pod(NS)
    async with watch.Watch() as stream:
        iterator = stream.stream(
            core.list_namespaced_pod,
            NS,
            resource_version=listed.metadata.resource_version,
            timeout_seconds=5,
        )
        waiter = asyncio.ensure_future(_collect(iterator, 1))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        await core.create_namespaced_pod(NS, pod("live", python_container("pass")))
        assert [(k, n) for k, n, _ in await asyncio.wait_for(waiter, 5)] == [("ADDED", "live")]


async def test_selector_watch_sees_relabelled_pod_as_deleted(kube_api: client.ApiClient) -> None:
    """What a warm pool watch sees when a pod is claimed out of its selector, and back."""
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_pod(
        NS, pod("p", python_container("pass"), labels={"pool": "warm"})
    )
    listed = await core.list_namespaced_pod(NS, label_selector="pool=warm")
    await core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"pool": "claimed"}}})
    await core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"other": "1"}}})
    await core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"pool": "warm"}}})
    async with watch.Watch() as stream:
        seen = await _collect(
            stream.stream(
                core.list_namespaced_pod,
                NS,
                label_selector="pool=warm",
                resource_version=listed.metadata.resource_version,
                timeout_seconds=5,
            ),
            2,
        )
    assert [(kind, name) for kind, name, _ in seen] == [("DELETED", "p"), ("ADDED", "p")]


async def test_timeout_seconds_ends_the_stream(kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    listed = await core.list_namespaced_pod(NS)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with watch.Watch() as stream:
        events = [
            e
            async for e in stream.stream(
                core.list_namespaced_pod,
                NS,
                resource_version=listed.metadata.resource_version,
                timeout_seconds=1,
            )
        ]
    assert events == []
    assert 0.9 <= loop.time() - started < HUNG_AFTER_S  # at its 1 s, and never hung


async def test_bookmarks_carry_the_latest_version_past_a_compaction(
    kube_apiserver_factory: Any,
) -> None:
    server = kube_apiserver_factory(bookmark_interval_s=0.1)
    async with client.ApiClient(server.client_configuration()) as api:
        core = client.CoreV1Api(api)
        listed = await core.list_namespaced_pod(NS)
        other = await core.create_namespaced_config_map(NS, {"metadata": {"name": "noise"}})
        async with watch.Watch() as stream:
            iterator = stream.stream(
                core.list_namespaced_pod,
                NS,
                allow_watch_bookmarks=True,
                resource_version=listed.metadata.resource_version,
                timeout_seconds=5,
            )
            async for event in iterator:
                assert event["type"] == "BOOKMARK"
                stream.stop()
                break
            bookmark = stream.resource_version
        assert bookmark == other.metadata.resource_version
        server.compact()
        async with watch.Watch() as stream:  # resuming from the bookmark works after compaction
            await core.create_namespaced_pod(NS, pod("p", python_container("pass")))
            seen = await _collect(
                stream.stream(
                    core.list_namespaced_pod, NS, resource_version=bookmark, timeout_seconds=5
                ),
                1,
            )
        assert [(k, n) for k, n, _ in seen] == [("ADDED", "p")]


async def test_compacted_history_is_an_error_event_410(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api)
    listed = await core.list_namespaced_pod(NS)
    await core.create_namespaced_pod(NS, pod("p", python_container("pass")))
    kube_apiserver.compact()
    with pytest.raises(ApiException) as err:
        async with watch.Watch() as stream:
            async for _ in stream.stream(
                core.list_namespaced_pod,
                NS,
                timeout_seconds=5,
                resource_version=listed.metadata.resource_version,
            ):
                pass
    assert err.value.status == 410 and "too old resource version" in err.value.reason
    watches = [r for r in kube_apiserver.requests if r.verb == "watch"]
    assert len(watches) == 1  # with timeout_seconds, Watch raises at once


async def test_client_watch_retries_410_once_with_the_same_version_then_raises(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    """Documents kubernetes-asyncio's `Watch` without timeout_seconds: on a 410 ERROR event it
    reconnects once with the SAME stale resourceVersion, gets 410 again and raises. A backend
    must catch ApiException(410), re-list, and watch from the new list's resourceVersion."""
    core = client.CoreV1Api(kube_api)
    listed = await core.list_namespaced_pod(NS)
    stale = listed.metadata.resource_version
    await core.create_namespaced_pod(NS, pod("p", python_container("pass")))
    kube_apiserver.compact()
    with pytest.raises(ApiException) as err:
        async with watch.Watch() as stream:
            async for _ in stream.stream(core.list_namespaced_pod, NS, resource_version=stale):
                pass
    assert err.value.status == 410
    watches = [r for r in kube_apiserver.requests if r.verb == "watch"]
    assert [r.query["resourceVersion"] for r in watches] == [stale, stale]

    relisted = await core.list_namespaced_pod(NS)  # the fix: re-list, then watch from there
    assert [p.metadata.name for p in relisted.items] == ["p"]
    await core.delete_namespaced_pod("p", NS)
    async with watch.Watch() as stream:
        seen = await _collect(
            stream.stream(
                core.list_namespaced_pod,
                NS,
                timeout_seconds=5,
                resource_version=relisted.metadata.resource_version,
            ),
            1,
        )
    assert [(k, n) for k, n, _ in seen] == [("DELETED", "p")]


async def test_bounded_history_expires_old_versions(kube_apiserver_factory: Any) -> None:
    server = kube_apiserver_factory(history_size=3)
    async with client.ApiClient(server.client_configuration()) as api:
        core = client.CoreV1Api(api)
        listed = await core.list_namespaced_config_map(NS)
        for i in range(3):
            await core.create_namespaced_config_map(NS, {"metadata": {"name": f"c{i}"}})
        async with watch.Watch() as stream:  # still inside the history: replayed
            seen = await _collect(
                stream.stream(
                    core.list_namespaced_config_map,
                    NS,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=5,
                ),
                3,
            )
        assert [n for _, n, _ in seen] == ["c0", "c1", "c2"]
        await core.create_namespaced_config_map(NS, {"metadata": {"name": "c3"}})
        with pytest.raises(ApiException) as err:
            async with watch.Watch() as stream:
                async for _ in stream.stream(
                    core.list_namespaced_config_map,
                    NS,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=5,
                ):
                    pass
        assert err.value.status == 410


async def test_end_watches_closes_open_streams(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api)
    listed = await core.list_namespaced_pod(NS)

    async def drain() -> list[Any]:
        async with watch.Watch() as stream:
            return [
                e
                async for e in stream.stream(
                    core.list_namespaced_pod,
                    NS,
                    timeout_seconds=60,
                    resource_version=listed.metadata.resource_version,
                )
            ]

    task = asyncio.ensure_future(drain())
    for _ in range(100):
        if await asyncio.to_thread(kube_apiserver.open_watches):
            break
        await asyncio.sleep(0.02)
    assert await asyncio.to_thread(kube_apiserver.end_watches) == 1
    assert await asyncio.wait_for(task, 5) == []
