"""Deployments, ReplicaSets and `/scale` on the fake API server, with its controllers: the
warm-pool behaviours Thaw relies on (scale, replacement of a claimed pod, deletion order,
garbage collection)."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_controllers import DELETION_COST
from tests.fakes.kube_fixtures import eventually
from tests.fakes.kube_manifests import deployment, python_container

NS = "default"
POOL = {"thaw.dev/pool": "warm"}


async def _pool_pods(core: client.CoreV1Api) -> list[client.V1Pod]:
    listed = await core.list_namespaced_pod(NS, label_selector="thaw.dev/pool=warm")
    return [p for p in listed.items if not p.metadata.deletion_timestamp]


async def _pool_size(core: client.CoreV1Api, size: int) -> list[client.V1Pod]:
    async def check() -> bool:
        return len(await _pool_pods(core)) == size

    await eventually(check, timeout_s=5)
    return await _pool_pods(core)


async def test_deployment_creates_its_pods_through_a_replicaset(kube_api: client.ApiClient) -> None:
    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    made = await apps.create_namespaced_deployment(
        NS, deployment("pool", python_container("pass"), replicas=2, labels=POOL)
    )
    pods = await _pool_size(core, 2)
    replicasets = (await apps.list_namespaced_replica_set(NS)).items
    assert len(replicasets) == 1
    rs = replicasets[0]
    assert rs.metadata.owner_references[0].uid == made.metadata.uid
    assert {p.metadata.owner_references[0].uid for p in pods} == {rs.metadata.uid}
    assert all(p.metadata.name.startswith(rs.metadata.name + "-") for p in pods)
    assert all("pod-template-hash" in p.metadata.labels for p in pods)

    async def observed() -> bool:
        d = await apps.read_namespaced_deployment_status("pool", NS)
        return d.status.replicas == 2 and d.status.observed_generation == 1

    await eventually(observed, timeout_s=5)


async def test_scale_subresource_get_patch_put(kube_api: client.ApiClient) -> None:
    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    await apps.create_namespaced_deployment(
        NS, deployment("pool", python_container("pass"), replicas=1, labels=POOL)
    )
    await _pool_size(core, 1)
    scale = await apps.read_namespaced_deployment_scale("pool", NS)
    assert scale.spec.replicas == 1 and scale.status.selector == "thaw.dev/pool=warm"

    await apps.patch_namespaced_deployment_scale("pool", NS, {"spec": {"replicas": 3}})
    await _pool_size(core, 3)

    scale = await apps.read_namespaced_deployment_scale("pool", NS)
    scale.spec.replicas = 2
    await apps.replace_namespaced_deployment_scale("pool", NS, scale)
    await _pool_size(core, 2)
    with pytest.raises(ApiException) as err:  # the same Scale again: its version is stale now
        await apps.replace_namespaced_deployment_scale("pool", NS, scale)
    assert err.value.status == 409
    with pytest.raises(ApiException) as err:
        await apps.patch_namespaced_deployment_scale("pool", NS, {"spec": {"replicas": -1}})
    assert err.value.status == 422
    assert (await apps.read_namespaced_deployment("pool", NS)).spec.replicas == 2


async def test_relabelled_pod_is_released_and_replaced(kube_api: client.ApiClient) -> None:
    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    await apps.create_namespaced_deployment(
        NS, deployment("pool", python_container("pass"), replicas=2, labels=POOL)
    )
    pods = await _pool_size(core, 2)
    claimed = pods[0]
    await core.patch_namespaced_pod(
        claimed.metadata.name,
        NS,
        {
            "metadata": {
                "resourceVersion": claimed.metadata.resource_version,
                "labels": {"thaw.dev/pool": None, "thaw.dev/model": "resnet"},
            }
        },
    )
    replaced = await _pool_size(core, 2)
    assert claimed.metadata.name not in {p.metadata.name for p in replaced}

    async def released() -> bool:
        pod = await core.read_namespaced_pod(claimed.metadata.name, NS)
        return not pod.metadata.owner_references

    await eventually(released, timeout_s=5)
    # Deleting the deployment garbage-collects its pods, but not the released one.
    await apps.delete_namespaced_deployment("pool", NS)
    await _pool_size(core, 0)
    assert (await core.read_namespaced_pod(claimed.metadata.name, NS)).metadata.labels[
        "thaw.dev/model"
    ] == "resnet"
    assert (await apps.list_namespaced_replica_set(NS)).items == []


async def test_orphan_propagation_keeps_the_pods(kube_api: client.ApiClient) -> None:
    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    await apps.create_namespaced_deployment(
        NS, deployment("pool", python_container("pass"), replicas=2, labels=POOL)
    )
    await _pool_size(core, 2)
    replicaset = (await apps.list_namespaced_replica_set(NS)).items[0]
    await apps.delete_namespaced_replica_set(
        replicaset.metadata.name, NS, propagation_policy="Orphan"
    )
    # The deployment makes a new ReplicaSet, which adopts the orphans instead of adding pods.
    pods = await _pool_size(core, 2)

    async def adopted() -> bool:
        sets = (await apps.list_namespaced_replica_set(NS)).items
        if len(sets) != 1 or sets[0].metadata.uid == replicaset.metadata.uid:
            return False
        owners = {
            p.metadata.owner_references[0].uid
            for p in await _pool_pods(core)
            if p.metadata.owner_references
        }
        return owners == {sets[0].metadata.uid}

    await eventually(adopted, timeout_s=5)
    assert {p.metadata.name for p in await _pool_pods(core)} == {p.metadata.name for p in pods}


async def test_scale_down_deletes_the_cheapest_pod_first(kube_api: client.ApiClient) -> None:
    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    await apps.create_namespaced_deployment(
        NS, deployment("pool", python_container("pass"), replicas=3, labels=POOL)
    )
    pods = await _pool_size(core, 3)
    costs = {pods[0].metadata.name: "10", pods[1].metadata.name: "-5", pods[2].metadata.name: "3"}
    for name, cost in costs.items():
        await core.patch_namespaced_pod(
            name, NS, {"metadata": {"annotations": {DELETION_COST: cost}}}
        )
    await apps.patch_namespaced_deployment_scale("pool", NS, {"spec": {"replicas": 1}})
    left = await _pool_size(core, 1)
    assert left[0].metadata.name == pods[0].metadata.name


async def test_template_change_replaces_the_replicaset(kube_api: client.ApiClient) -> None:
    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    await apps.create_namespaced_deployment(
        NS, deployment("pool", python_container("pass"), replicas=2, labels=POOL)
    )
    first = await _pool_size(core, 2)
    updated = await apps.patch_namespaced_deployment(
        "pool",
        NS,
        {
            "spec": {
                "template": {"spec": {"containers": [{"name": "main", "image": "python:3.12"}]}}
            }
        },
    )
    assert updated.metadata.generation == 2

    async def rolled() -> bool:
        pods = await _pool_pods(core)
        return len(pods) == 2 and all(p.spec.containers[0].image == "python:3.12" for p in pods)

    await eventually(rolled, timeout_s=5)
    assert not {p.metadata.name for p in first} & {p.metadata.name for p in await _pool_pods(core)}
    sets = {
        rs.spec.template.spec.containers[0].image: rs.spec.replicas
        for rs in (await apps.list_namespaced_replica_set(NS)).items
    }
    assert sets == {"python:3.11": 0, "python:3.12": 2}


async def test_replicaset_scale_and_invalid_selector(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    apps = client.AppsV1Api(kube_api)
    body = deployment("rs", python_container("pass"), replicas=1, labels=POOL)
    body.update(kind="ReplicaSet")
    await apps.create_namespaced_replica_set(NS, body)
    await apps.patch_namespaced_replica_set_scale("rs", NS, {"spec": {"replicas": 2}})
    await eventually(lambda: len(kube_apiserver.objects("pods", NS)) == 2, timeout_s=5)
    bad = deployment("bad", python_container("pass"), replicas=1, labels=POOL)
    bad["spec"]["selector"] = {"matchLabels": {"other": "x"}}
    with pytest.raises(ApiException) as err:
        await apps.create_namespaced_deployment(NS, bad)
    assert err.value.status == 422 and "selector" in err.value.body
    with pytest.raises(ApiException) as err:  # the selector is immutable
        await apps.patch_namespaced_replica_set(
            "rs", NS, {"spec": {"selector": {"matchLabels": {"thaw.dev/pool": "warm", "x": "y"}}}}
        )
    assert err.value.status == 422
