"""kubernetes-asyncio, unchanged, against the fake API server: CRUD, resourceVersions, 409/422/415
with real `Status` bodies, patch content types, selectors, status scoping, deletion."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiException

from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.kube_manifests import pod, python_container
from tests.fakes.kube_resources import custom_resource

NS = "default"


def _status(err: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body = json.loads(err.value.body)
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert body["code"] == err.value.status
    return body


async def test_create_read_list_replace_delete(kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    created = await core.create_namespaced_config_map(
        NS, {"metadata": {"name": "settings", "labels": {"app": "thaw"}}, "data": {"a": "1"}}
    )
    assert created.metadata.uid and created.metadata.creation_timestamp
    first_rv = int(created.metadata.resource_version)

    read = await core.read_namespaced_config_map("settings", NS)
    assert read.data == {"a": "1"} and read.metadata.resource_version == str(first_rv)

    read.data = {"a": "2"}
    replaced = await core.replace_namespaced_config_map("settings", NS, read)
    assert int(replaced.metadata.resource_version) > first_rv
    assert replaced.metadata.uid == created.metadata.uid

    listed = await core.list_namespaced_config_map(NS)
    assert [c.metadata.name for c in listed.items] == ["settings"]
    assert listed.metadata.resource_version == replaced.metadata.resource_version

    status = await core.delete_namespaced_config_map("settings", NS)
    assert status.status == "Success" and status.details.name == "settings"
    with pytest.raises(ApiException) as err:
        await core.read_namespaced_config_map("settings", NS)
    assert _status(err)["reason"] == "NotFound"


async def test_secrets_round_trip_with_string_data_folded_into_data(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api)
    created = await core.create_namespaced_secret(
        NS,
        {
            "metadata": {"name": "token", "labels": {"app": "thaw"}},
            "data": {"token": "b2xk", "kept": "a2VwdA=="},
            "stringData": {"token": "new"},
        },
    )
    assert created.type == "Opaque" and created.metadata.uid
    assert created.data == {"token": "bmV3", "kept": "a2VwdA=="}, "stringData wins, encoded"
    assert "stringData" not in (kube_apiserver.get("secrets", NS, "token") or {})

    read = await core.read_namespaced_secret("token", NS)
    assert read.data == created.data and read.string_data is None
    listed = await core.list_namespaced_secret(NS, label_selector="app=thaw")
    assert [s.metadata.name for s in listed.items] == ["token"]

    patched = await core.patch_namespaced_secret("token", NS, {"stringData": {"more": "x"}})
    assert patched.data == {"token": "bmV3", "kept": "a2VwdA==", "more": "eA=="}
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)
    merged = await core.patch_namespaced_secret(
        "token", NS, {"data": {"kept": None}}, _content_type="application/merge-patch+json"
    )
    assert merged.data == {"token": "bmV3", "more": "eA=="}

    status = await core.delete_namespaced_secret("token", NS)
    assert status.status == "Success" and status.details.kind == "secrets"
    with pytest.raises(ApiException) as err:
        await core.read_namespaced_secret("token", NS)
    assert _status(err)["reason"] == "NotFound"


async def test_a_secret_is_refused_as_the_real_server_refuses_it(
    kube_api: client.ApiClient,
) -> None:
    core = client.CoreV1Api(kube_api)
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_secret(
            NS, {"metadata": {"name": "bad"}, "data": {"token": "not base64!"}}
        )
    assert (err.value.status, _status(err)["reason"]) == (400, "BadRequest")
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_secret(
            NS, {"metadata": {"name": "bad"}, "stringData": {"a/b": "x"}}
        )
    assert (err.value.status, _status(err)["details"]["causes"][0]["field"]) == (422, "data[a/b]")

    await core.create_namespaced_secret(NS, {"metadata": {"name": "typed"}, "type": "Opaque"})
    with pytest.raises(ApiException) as err:
        await core.patch_namespaced_secret("typed", NS, {"type": "kubernetes.io/tls"})
    assert (err.value.status, _status(err)["details"]["causes"][0]["field"]) == (422, "type")


async def test_resource_version_is_one_counter_across_types(kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    a = await core.create_namespaced_config_map(NS, {"metadata": {"name": "a"}})
    b = await core.create_namespaced_service(
        NS, {"metadata": {"name": "b"}, "spec": {"ports": [{"port": 80}]}}
    )
    c = await core.create_namespaced_config_map("other", {"metadata": {"name": "a"}})
    versions = [int(o.metadata.resource_version) for o in (a, b, c)]
    assert versions == sorted(versions) and len(set(versions)) == 3
    assert b.spec.cluster_ip and b.spec.ports[0].target_port == 80


async def test_create_existing_is_409_already_exists(kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_config_map(NS, {"metadata": {"name": "x"}})
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_config_map(NS, {"metadata": {"name": "x"}})
    body = _status(err)
    assert (err.value.status, body["reason"]) == (409, "AlreadyExists")
    assert body["details"] == {"name": "x", "kind": "configmaps"}


async def test_generate_name(kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    made = await core.create_namespaced_config_map(NS, {"metadata": {"generateName": "job-"}})
    assert made.metadata.name.startswith("job-") and len(made.metadata.name) == 9


async def test_patch_with_stale_resource_version_is_409_conflict(
    kube_api: client.ApiClient,
) -> None:
    core = client.CoreV1Api(kube_api)
    created = await core.create_namespaced_pod(NS, pod("p", python_container("pass")))
    stale = created.metadata.resource_version
    await core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"step": "1"}}})
    # The optimistic-concurrency claim of a warm-pool pod: a patch that carries the version.
    claim = {"metadata": {"resourceVersion": stale, "labels": {"thaw.dev/claimed": "m"}}}
    with pytest.raises(ApiException) as err:
        await core.patch_namespaced_pod("p", NS, claim)
    body = _status(err)
    assert (err.value.status, body["reason"]) == (409, "Conflict")
    assert "the object has been modified" in body["message"]
    current = await core.read_namespaced_pod("p", NS)
    assert "thaw.dev/claimed" not in current.metadata.labels
    claim["metadata"]["resourceVersion"] = current.metadata.resource_version
    claimed = await core.patch_namespaced_pod("p", NS, claim)
    assert claimed.metadata.labels["thaw.dev/claimed"] == "m"


async def test_replace_with_stale_resource_version_is_409(kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    old = await core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}})
    await core.patch_namespaced_config_map("c", NS, {"data": {"k": "v"}})
    with pytest.raises(ApiException) as err:
        await core.replace_namespaced_config_map("c", NS, old)
    assert _status(err)["reason"] == "Conflict"


async def test_json_patch_test_op_failure_is_422(kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_pod(
        NS, pod("p", python_container("pass"), labels={"pool": "warm"})
    )
    # A list body makes the client send application/json-patch+json.
    claim = [
        {"op": "test", "path": "/metadata/labels/pool", "value": "warm"},
        {"op": "replace", "path": "/metadata/labels/pool", "value": "claimed"},
    ]
    claimed = await core.patch_namespaced_pod("p", NS, claim)
    assert claimed.metadata.labels["pool"] == "claimed"
    with pytest.raises(ApiException) as err:
        await core.patch_namespaced_pod("p", NS, claim)
    assert (err.value.status, _status(err)["reason"]) == (422, "Invalid")


async def test_patch_content_types(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api)
    container = {**python_container("pass"), "env": [{"name": "A", "value": "1"}]}
    await core.create_namespaced_pod(NS, pod("p", container))
    # A dict body: the client picks strategic merge, so env merges by name.
    await core.patch_namespaced_pod(
        "p", NS, {"spec": {"containers": [{"name": "main", "env": [{"name": "A", "value": "1"}]}]}}
    )
    strategic = await core.patch_namespaced_pod(
        "p", NS, {"spec": {"containers": [{"name": "main", "image": "python:3.12"}]}}
    )
    assert strategic.spec.containers[0].image == "python:3.12"
    assert [e.name for e in strategic.spec.containers[0].env] == ["A"]
    # merge patch replaces lists wholesale; a pod's containers cannot change that way (422).
    with pytest.raises(ApiException) as err:
        await core.patch_namespaced_pod(
            "p",
            NS,
            {"spec": {"containers": [{"name": "main", "image": "x"}]}},
            _content_type="application/merge-patch+json",
        )
    assert err.value.status == 422
    merged = await core.patch_namespaced_pod(
        "p", NS, {"metadata": {"labels": {"m": "1"}}}, _content_type="application/merge-patch+json"
    )
    assert merged.metadata.labels == {"m": "1"}
    sent = [r.content_type for r in kube_apiserver.requests if r.verb == "patch"]
    assert (
        sent
        == ["application/strategic-merge-patch+json"] * 2 + ["application/merge-patch+json"] * 2
    )


async def test_noop_patch_writes_nothing(kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    made = await core.create_namespaced_config_map(
        NS, {"metadata": {"name": "c", "labels": {"a": "1"}}}
    )
    same = await core.patch_namespaced_config_map("c", NS, {"metadata": {"labels": {"a": "1"}}})
    assert same.metadata.resource_version == made.metadata.resource_version


async def test_strategic_merge_on_custom_resource_is_415(
    kube_apiserver_factory: Any,
) -> None:
    models = custom_resource("thaw.dev", "v1", "models", "Model")
    server = kube_apiserver_factory(custom_resources=(models,))
    async with client.ApiClient(server.client_configuration()) as api:
        custom = client.CustomObjectsApi(api)
        made = await custom.create_namespaced_custom_object(
            "thaw.dev",
            "v1",
            NS,
            "models",
            {
                "apiVersion": "thaw.dev/v1",
                "kind": "Model",
                "metadata": {"name": "resnet"},
                "spec": {"replicas": 1},
            },
        )
        assert made["metadata"]["generation"] == 1
        patched = await custom.patch_namespaced_custom_object(
            "thaw.dev",
            "v1",
            NS,
            "models",
            "resnet",
            {"spec": {"replicas": 2}},
            _content_type="application/merge-patch+json",
        )
        assert patched["spec"]["replicas"] == 2 and patched["metadata"]["generation"] == 2
        with pytest.raises(ApiException) as err:
            await custom.patch_namespaced_custom_object(
                "thaw.dev",
                "v1",
                NS,
                "models",
                "resnet",
                {"spec": {"replicas": 3}},
                _content_type="application/strategic-merge-patch+json",
            )
        assert (err.value.status, _status(err)["reason"]) == (415, "UnsupportedMediaType")


async def test_label_and_field_selectors_on_list(kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    for name, labels in (
        ("a", {"pool": "warm", "gpu": "1"}),
        ("b", {"pool": "warm"}),
        ("c", {"pool": "claimed"}),
    ):
        await core.create_namespaced_pod(NS, pod(name, python_container("pass"), labels=labels))

    async def names(**query: str) -> list[str]:
        return [p.metadata.name for p in (await core.list_namespaced_pod(NS, **query)).items]

    assert await names(label_selector="pool=warm") == ["a", "b"]
    assert await names(label_selector="pool in (warm,claimed),!gpu") == ["b", "c"]
    assert await names(label_selector="pool!=warm") == ["c"]
    assert await names(label_selector="gpu") == ["a"]
    assert await names(field_selector="metadata.name=b") == ["b"]
    assert await names(field_selector="status.phase=Pending,spec.nodeName=") == ["a", "b", "c"]
    with pytest.raises(ApiException) as err:
        await names(field_selector="spec.image=x")
    assert err.value.status == 400


async def test_list_pagination_with_continue(kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    for i in range(5):
        await core.create_namespaced_config_map(NS, {"metadata": {"name": f"c{i}"}})
    page = await core.list_namespaced_config_map(NS, limit=2)
    seen = [c.metadata.name for c in page.items]
    assert page.metadata.remaining_item_count == 3
    while page.metadata._continue:
        page = await core.list_namespaced_config_map(NS, limit=2, _continue=page.metadata._continue)
        seen += [c.metadata.name for c in page.items]
    assert seen == [f"c{i}" for i in range(5)]


async def test_too_old_continue_token_is_410(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api)
    for i in range(3):
        await core.create_namespaced_config_map(NS, {"metadata": {"name": f"c{i}"}})
    page = await core.list_namespaced_config_map(NS, limit=1)
    await core.create_namespaced_config_map(NS, {"metadata": {"name": "later"}})
    kube_apiserver.compact()
    with pytest.raises(ApiException) as err:
        await core.list_namespaced_config_map(NS, limit=1, _continue=page.metadata._continue)
    assert (err.value.status, _status(err)["reason"]) == (410, "Expired")


async def test_status_subresource_scopes_writes(kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_pod(NS, pod("p", python_container("pass")))
    # The main resource ignores status; the status subresource ignores everything else.
    ignored = await core.patch_namespaced_pod(
        "p", NS, {"status": {"phase": "Running"}, "metadata": {"labels": {"a": "1"}}}
    )
    assert ignored.status.phase == "Pending" and ignored.metadata.labels == {"a": "1"}
    status = await core.patch_namespaced_pod_status(
        "p", NS, {"status": {"phase": "Running"}, "metadata": {"labels": {"b": "2"}}}
    )
    assert status.status.phase == "Running" and status.metadata.labels == {"a": "1"}
    assert status.metadata.generation == 1


async def test_invalid_objects_are_422(kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod(
            NS, {"metadata": {"name": "Bad_Name"}, "spec": {"containers": []}}
        )
    body = _status(err)
    assert body["reason"] == "Invalid"
    assert {c["field"] for c in body["details"]["causes"]} == {"metadata.name", "spec.containers"}


async def test_deleting_an_unscheduled_pod_is_immediate(kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_pod(NS, pod("p", python_container("pass")))
    gone = await core.delete_namespaced_pod("p", NS)
    assert gone.metadata.name == "p"
    with pytest.raises(ApiException):
        await core.read_namespaced_pod("p", NS)


async def test_deleting_a_bound_pod_is_graceful(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    """No kubelet runs here: the pod stays, marked, as on a cluster whose node is gone."""
    core = client.CoreV1Api(kube_api)
    made = await core.create_namespaced_pod(NS, pod("p", python_container("pass"), grace_s=20))
    response = await core.create_namespaced_pod_binding(
        "p",
        NS,
        {"target": {"kind": "Node", "name": "n1"}, "metadata": {"name": "p"}},
        _preload_content=False,
    )
    assert response.status == 201
    bound = await core.read_namespaced_pod("p", NS)
    assert bound.spec.node_name == "n1"
    assert {c.type: c.status for c in bound.status.conditions} == {"PodScheduled": "True"}

    with pytest.raises(ApiException) as err:  # a precondition on the wrong uid
        await core.delete_namespaced_pod(
            "p", NS, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="x"))
        )
    assert err.value.status == 409

    marked = await core.delete_namespaced_pod("p", NS, grace_period_seconds=5)
    assert marked.metadata.deletion_timestamp is not None
    assert marked.metadata.deletion_grace_period_seconds == 5
    assert kube_apiserver.get("pods", NS, "p") is not None
    await core.delete_namespaced_pod(
        "p",
        NS,
        grace_period_seconds=0,
        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=made.metadata.uid)),
    )
    assert kube_apiserver.get("pods", NS, "p") is None


async def test_finalizers_hold_deletion_until_removed(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_config_map(
        NS, {"metadata": {"name": "c", "finalizers": ["thaw.dev/drain"]}}
    )
    await core.delete_namespaced_config_map("c", NS)
    held = await core.read_namespaced_config_map("c", NS)
    assert held.metadata.deletion_timestamp is not None
    await core.patch_namespaced_config_map(
        "c", NS, [{"op": "remove", "path": "/metadata/finalizers"}]
    )
    assert kube_apiserver.get("configmaps", NS, "c") is None


async def test_immutable_pod_spec_is_422(kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_pod(NS, pod("p", python_container("pass")))
    with pytest.raises(ApiException) as err:
        await core.patch_namespaced_pod(
            "p", NS, {"spec": {"containers": [{"name": "main", "args": ["x"]}]}}
        )
    assert err.value.status == 422 and "pod updates may not change" in err.value.body


async def test_delete_collection_by_label(
    kube_apiserver: FakeKubeApiServer, kube_api: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_api)
    for name, pool in (("a", "warm"), ("b", "warm"), ("c", "claimed")):
        await core.create_namespaced_pod(
            NS, pod(name, python_container("pass"), labels={"pool": pool})
        )
    await core.delete_collection_namespaced_pod(NS, label_selector="pool=warm")
    assert [p["metadata"]["name"] for p in kube_apiserver.objects("pods", NS)] == ["c"]
