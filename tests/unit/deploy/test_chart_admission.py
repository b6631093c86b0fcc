"""The chart's ValidatingAdmissionPolicies, their CEL evaluated (cel-python) against the pods the
chart's own templates make and against tampered ones, as the API server would: a pod the
activator's service account creates or patches must be a runtime pod of the pool template (the
runtime's account, no API token, the chart's images, no volume but configMap/emptyDir/PVC and the
node cache); every pod in the namespace keeps Pod Security baseline except the cache's hostPath.
"""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest
import yaml

from tests.unit.deploy.chart_paths import CHART, Render

VALUES: dict[str, Any] = yaml.safe_load((CHART / "examples" / "gpu-karpenter.yaml").read_text())
ACTIVATOR = "system:serviceaccount:thaw:thaw"


class Policy:
    """One rendered ValidatingAdmissionPolicy, evaluated as admission would."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.spec = obj["spec"]
        self.env = celpy.Environment()

    def _eval(self, expression: str, activation: dict[str, Any]) -> Any:
        return self.env.program(self.env.compile(expression)).evaluate(activation)

    def denials(self, pod: dict[str, Any], *, user: str) -> list[str]:
        """The messages of the validations `pod` fails ([] = admitted or not matched)."""
        base = celpy.json_to_cel({"object": pod, "request": {"userInfo": {"username": user}}})
        for condition in self.spec.get("matchConditions", []):
            if not bool(self._eval(condition["expression"], base)):
                return []
        variables = {
            celpy.celtypes.StringType(v["name"]): self._eval(v["expression"], base)
            for v in self.spec.get("variables", [])
        }
        activation = {**base, "variables": celpy.celtypes.MapType(variables)}
        return [
            rule["message"]
            for rule in self.spec["validations"]
            if not bool(self._eval(rule["expression"], activation))
        ]


@pytest.fixture(scope="module")
def rendered(render: Render) -> list[dict[str, Any]]:
    return render(VALUES)


def _policy(objects: list[dict[str, Any]], suffix: str) -> Policy:
    (found,) = [
        o
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"].endswith(suffix)
    ]
    return Policy(found)


def _pool_pods(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A pod as each pool Deployment's ReplicaSet (or the activator, from the template) makes it."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": o["spec"]["template"]["metadata"],
            "spec": o["spec"]["template"]["spec"],
        }
        for o in objects
        if o["kind"] == "Deployment" and "-pool" in o["metadata"]["name"]
    ]


def test_pool_template_pods_are_admitted(rendered: list[dict[str, Any]]) -> None:
    pods = _pool_pods(rendered)
    assert len(pods) == len(VALUES["runtime"]["pools"])
    for pod in pods:
        for suffix in ("-activator-pods", "-thaw-pods"):
            assert _policy(rendered, suffix).denials(pod, user=ACTIVATOR) == [], suffix


def test_every_chart_pod_keeps_baseline_but_the_cache(rendered: list[dict[str, Any]]) -> None:
    policy = _policy(rendered, "-thaw-pods")
    for obj in rendered:
        if obj["kind"] in ("Deployment", "DaemonSet"):
            pod = {
                "metadata": obj["spec"]["template"]["metadata"],
                "spec": obj["spec"]["template"]["spec"],
            }
            assert (
                policy.denials(pod, user="system:serviceaccount:kube-system:replicaset-controller")
                == []
            )


def _tampered(pod: dict[str, Any], change: str) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    if change == "service account":
        spec["serviceAccountName"] = "thaw-image-builder"
    elif change == "api token":
        spec["automountServiceAccountToken"] = True
    elif change == "image":
        spec["containers"][0]["image"] = "evil.example.com/miner:latest"
    elif change == "init image":
        spec["initContainers"] = [{"name": "x", "image": "evil.example.com/x:1"}]
    elif change == "host root":
        spec["volumes"].append({"name": "root", "hostPath": {"path": "/"}})
    elif change == "other secret":
        spec["volumes"].append({"name": "keys", "secret": {"secretName": "cloud-credentials"}})
    elif change == "root user":
        spec["securityContext"]["runAsNonRoot"] = False
    elif change == "not a runtime pod":
        pod["metadata"]["labels"].pop("thaw.dev/runtime")
    elif change == "privileged":
        spec["containers"][0]["securityContext"]["privileged"] = True
    elif change == "host network":
        spec["hostNetwork"] = True
    elif change == "capability":
        spec["containers"][0]["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]
    return pod


@pytest.mark.parametrize(
    ("change", "policy", "words"),
    [
        ("service account", "-activator-pods", "run as the runtime's account (thaw-runtime) only"),
        ("api token", "-activator-pods", "carry no API token"),
        ("image", "-activator-pods", "run the chart's images only"),
        ("init image", "-activator-pods", "run the chart's images only"),
        ("host root", "-activator-pods", "the node cache (/mnt/thaw-cache) and the deployment"),
        ("other secret", "-activator-pods", "token (Secret rel-thaw-internal) only"),
        ("root user", "-activator-pods", "run as non-root"),
        (
            "not a runtime pod",
            "-activator-pods",
            "only create or patch this release's runtime pods",
        ),
        ("privileged", "-thaw-pods", "no privileged containers"),
        ("host network", "-thaw-pods", "no host namespaces"),
        ("capability", "-thaw-pods", "only Pod Security baseline's capabilities"),
        ("host root", "-thaw-pods", "the only hostPath volume allowed here is the node cache"),
    ],
)
def test_a_tampered_pod_is_denied(
    rendered: list[dict[str, Any]], change: str, policy: str, words: str
) -> None:
    (pod, *_) = _pool_pods(rendered)
    denials = _policy(rendered, policy).denials(_tampered(pod, change), user=ACTIVATOR)
    assert any(words in d for d in denials), denials


def test_the_activator_policy_applies_to_the_activator_only(rendered: list[dict[str, Any]]) -> None:
    (pod, *_) = _pool_pods(rendered)
    tampered = _tampered(pod, "service account")
    policy = _policy(rendered, "-activator-pods")
    assert policy.denials(tampered, user="system:serviceaccount:thaw:thaw-image-builder") == []
    assert policy.denials(tampered, user=ACTIVATOR)


def test_the_policies_bind_to_the_release_namespace_and_deny(
    rendered: list[dict[str, Any]],
) -> None:
    bindings = [o for o in rendered if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    policies = {o["metadata"]["name"] for o in rendered if o["kind"] == "ValidatingAdmissionPolicy"}
    assert {b["spec"]["policyName"] for b in bindings} == policies and len(policies) == 2
    for binding in bindings:
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert binding["spec"]["matchResources"]["namespaceSelector"] == {
            "matchLabels": {"kubernetes.io/metadata.name": "thaw"}
        }
