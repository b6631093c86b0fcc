"""Leases (MicroTime kept to the microsecond, conflicts on a stale resourceVersion), bearer
auth, kubeconfig, discovery, and RBAC through SelfSubjectAccessReview and 403s."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import ApiException

from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_authz import PolicyRule

NS = "thaw"


def _lease(holder: str, renew: str) -> dict[str, object]:
    return {
        "metadata": {"name": "thaw-scaler"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": renew,
            "renewTime": renew,
            "leaseTransitions": 0,
        },
    }


async def test_lease_micro_time_round_trips_exactly(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    leases = client.CoordinationV1Api(kube_api)
    made = await leases.create_namespaced_lease(NS, _lease("a-1", "2030-01-02T03:04:05.123456Z"))
    assert made.spec.renew_time == datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    stored = kube_apiserver.get("leases", NS, "thaw-scaler")
    assert stored is not None and stored["spec"]["renewTime"] == "2030-01-02T03:04:05.123456Z"
    # A tz-aware datetime from the client (isoformat with +00:00) is kept to the microsecond.
    made.spec.renew_time = datetime(2030, 1, 2, 3, 4, 6, 5, tzinfo=UTC)
    await leases.replace_namespaced_lease("thaw-scaler", NS, made)
    stored = kube_apiserver.get("leases", NS, "thaw-scaler")
    assert stored is not None and stored["spec"]["renewTime"] == "2030-01-02T03:04:06.000005Z"


async def test_lease_time_without_zone_is_400(kube_api: client.ApiClient) -> None:
    """What the real server does with a naive datetime's isoformat(): not RFC 3339."""
    leases = client.CoordinationV1Api(kube_api)
    with pytest.raises(ApiException) as err:
        await leases.create_namespaced_lease(NS, _lease("a", "2030-01-02T03:04:05.123456"))
    assert err.value.status == 400


async def test_lease_contenders_conflict_on_resource_version(kube_api: client.ApiClient) -> None:
    leases = client.CoordinationV1Api(kube_api)
    await leases.create_namespaced_lease(NS, _lease("a-1", "2030-01-01T00:00:00.000001Z"))
    with pytest.raises(ApiException) as err:
        await leases.create_namespaced_lease(NS, _lease("a-2", "2030-01-01T00:00:00.000002Z"))
    assert err.value.status == 409
    seen_by_a1 = await leases.read_namespaced_lease("thaw-scaler", NS)
    seen_by_a2 = await leases.read_namespaced_lease("thaw-scaler", NS)
    seen_by_a2.spec.holder_identity, seen_by_a2.spec.lease_transitions = "a-2", 1
    taken = await leases.replace_namespaced_lease("thaw-scaler", NS, seen_by_a2)
    assert taken.spec.holder_identity == "a-2"
    seen_by_a1.spec.renew_time = datetime(2030, 1, 1, 0, 0, 1, tzinfo=UTC)
    with pytest.raises(ApiException) as err:  # a-1 renews from a stale read: it lost
        await leases.replace_namespaced_lease("thaw-scaler", NS, seen_by_a1)
    assert err.value.status == 409 and json.loads(err.value.body)["reason"] == "Conflict"
    assert (await leases.read_namespaced_lease("thaw-scaler", NS)).spec.holder_identity == "a-2"


async def test_requests_without_the_token_are_401(kube_apiserver: FakeKubeApiServer) -> None:
    async with client.ApiClient(client.Configuration(host=kube_apiserver.url)) as api:
        with pytest.raises(ApiException) as err:
            await client.CoreV1Api(api).list_namespaced_pod("default")
    assert err.value.status == 401 and json.loads(err.value.body)["reason"] == "Unauthorized"


async def test_kubeconfig_points_at_the_fake(kubeconfig_path: Path) -> None:
    api = await config.new_client_from_config(config_file=str(kubeconfig_path))
    async with api:
        made = await client.CoreV1Api(api).create_namespaced_config_map(
            "default", {"metadata": {"name": "from-kubeconfig"}}
        )
    assert made.metadata.uid
    contexts, active = config.list_kube_config_contexts(config_file=str(kubeconfig_path))
    assert active["context"]["namespace"] == "default" and len(contexts) == 1


async def test_discovery_endpoints(kube_api: client.ApiClient) -> None:
    version = await client.VersionApi(kube_api).get_code()
    assert version.major == "1"
    groups = await client.ApisApi(kube_api).get_api_versions()
    assert {"apps", "coordination.k8s.io", "authorization.k8s.io"} <= {
        g.name for g in groups.groups
    }
    resources = await client.CoreV1Api(kube_api).get_api_resources()
    assert {"pods", "pods/status", "pods/binding", "services", "configmaps"} <= {
        r.name for r in resources.resources
    }


async def test_rbac_rules_answer_access_reviews_and_forbid(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    auth = client.AuthorizationV1Api(kube_api)

    async def allowed(verb: str, resource: str, group: str = "", sub: str = "") -> bool:
        review = await auth.create_self_subject_access_review(
            {
                "spec": {
                    "resourceAttributes": {
                        "namespace": NS,
                        "verb": verb,
                        "group": group,
                        "resource": resource,
                        "subresource": sub,
                    }
                }
            }
        )
        return bool(review.status.allowed)

    assert await allowed("patch", "pods")  # no rules installed: everything is allowed
    kube_apiserver.set_rbac(
        [
            PolicyRule(
                verbs=("get", "list", "watch", "patch"), resources=("pods",), api_groups=("",)
            ),
            PolicyRule(
                verbs=("get", "update"),
                resources=("leases",),
                api_groups=("coordination.k8s.io",),
                namespaces=(NS,),
            ),
        ]
    )
    assert await allowed("watch", "pods")
    assert not await allowed("delete", "pods")
    assert not await allowed("patch", "pods", sub="status")
    assert await allowed("update", "leases", "coordination.k8s.io")
    assert not await allowed("create", "leases", "coordination.k8s.io")
    core = client.CoreV1Api(kube_api)
    await core.list_namespaced_pod(NS)
    with pytest.raises(ApiException) as err:
        await core.delete_namespaced_pod("x", NS)
    body = json.loads(err.value.body)
    assert (err.value.status, body["reason"]) == (403, "Forbidden")
    assert 'cannot delete resource "pods"' in body["message"]


async def test_errors_on_unknown_paths_are_status_json(kube_apiserver: FakeKubeApiServer) -> None:
    headers = {"Authorization": "Bearer thaw-fake-token"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.get(kube_apiserver.url + "/api/v1/namespaces/x/nothings") as resp:
            assert resp.status == 404
            assert (await resp.json())["kind"] == "Status"
        async with session.put(kube_apiserver.url + "/api/v1/namespaces/x/pods") as resp:
            assert resp.status == 405
            assert (await resp.json())["reason"] == "MethodNotAllowed"
        async with session.post(
            kube_apiserver.url + "/api/v1/namespaces/x/pods", data=b"{not json"
        ) as resp:
            assert resp.status == 400
            assert (await resp.json())["reason"] == "BadRequest"
        async with session.post(
            kube_apiserver.url + "/api/v1/namespaces/x/configmaps", data=b" " * (4 << 20)
        ) as resp:
            assert resp.status == 413
            assert (await resp.json())["kind"] == "Status"
