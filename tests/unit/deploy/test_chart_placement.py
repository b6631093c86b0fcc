"""Placement per model in the Helm chart: one warm-pool Deployment per placement class
(`runtime.pools`), each with its GPUs, image, nodeSelector, tolerations and resources; the
activator told each class's Deployment (`--pool-deployment` for `default`, `--pool-class
NAME=DEPLOYMENT` for the others); each model's class in the models ConfigMap
(`thaw.placement_class`); and the render refusing a model its class cannot run (a CPU model on a
GPU class, more GPUs than the class has, a class that does not exist)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.deploy.chart_paths import CHART, Render, as_mounted

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
VALUES: dict[str, Any] = yaml.safe_load((CHART / "examples" / "gpu-karpenter.yaml").read_text())


def _pools(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["labels"]["thaw.dev/placement-class"]: o
        for o in objects
        if o["kind"] == "Deployment"
        and o["metadata"]["labels"].get("app.kubernetes.io/component") == "runtime"
    }


def _activator_args(objects: list[dict[str, Any]]) -> list[str]:
    (activator,) = [
        o
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-activator")
    ]
    (container,) = activator["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


def test_one_warm_pool_per_class_with_its_gpus_image_and_nodes(render: Render) -> None:
    pools = _pools(render(VALUES))
    assert set(pools) == set(VALUES["runtime"]["pools"])
    for name, wanted in VALUES["runtime"]["pools"].items():
        deployment = pools[name]
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        gpus = wanted.get("gpu", 0)
        assert deployment["spec"]["replicas"] == wanted["replicas"], name
        assert container["resources"].get("limits", {}).get("nvidia.com/gpu", 0) == gpus, name
        assert container["resources"].get("requests", {}).get("nvidia.com/gpu", 0) == gpus, name
        assert ("/thaw-cuda:" in container["image"]) == (gpus > 0), name
        assert (f"--target={'cuda' if gpus else 'cpu'}") in container["args"], name
        assert spec["nodeSelector"] == wanted["nodeSelector"], name
        assert (GPU_TOLERATION in spec.get("tolerations", [])) == (gpus > 0), name
        # The pool's selector is its own: claims and creations of one class never cross.
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector == {"thaw.dev/pool": deployment["metadata"]["name"]}
        assert deployment["spec"]["template"]["metadata"]["labels"].items() >= selector.items()


def test_the_activator_knows_every_class_deployment(render: Render) -> None:
    objects = render(VALUES)
    pools = _pools(objects)
    args = _activator_args(objects)
    default = pools["default"]["metadata"]["name"]
    assert f"--pool-deployment={default}" in args
    assert f"--pool-selector=thaw.dev/pool={default}" in args
    classes = [a.split("=", 1)[1] for a in args if a.startswith("--pool-class=")]
    assert sorted(classes) == sorted(
        f"{name}={pool['metadata']['name']}" for name, pool in pools.items() if name != "default"
    )


def test_thaw_up_parses_the_pool_class_flags(render: Render) -> None:
    from thaw.cli import build_parser

    args = build_parser("up").parse_args(_activator_args(render(VALUES)))
    assert args.pool_class, "the chart's --pool-class flags did not reach `thaw up`"


def test_each_model_carries_its_class_to_the_activator(render: Render, tmp_path: Path) -> None:
    objects = render(VALUES)
    (config_map,) = [
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-models")
    ]
    settings = json.loads(config_map["data"]["models.json"])["models"]
    for model in VALUES["models"]:
        wanted = model.get("placementClass")
        assert settings[model["name"]].get("thaw.placement_class") == wanted, model["name"]
        assert settings[model["name"]].get("thaw.activation_timeout_s") == (
            str(model["activationTimeoutSeconds"]) if "activationTimeoutSeconds" in model else None
        )
    from activator.fleet.model_settings import read_model_settings

    path = tmp_path / "models.json"
    path.write_text(config_map["data"]["models.json"])
    assert read_model_settings(path)["llama-3-8b"]["thaw.placement_class"] == "gpu1-g6e-xlarge"


def _with_models(*models: dict[str, Any]) -> dict[str, Any]:
    return {**VALUES, "models": list(models)}


@pytest.mark.parametrize(
    ("model", "words"),
    [
        # A CPU model never lands on a GPU pool.
        (
            {"name": "bert", "placementClass": "gpu1"},
            'a CPU model (gpu 0) may not use the GPU class "gpu1"',
        ),
        (
            {"name": "big", "gpu": 4, "placementClass": "gpu1"},
            'gpu = 4, but its class "gpu1" has 1 GPUs per pod',
        ),
        ({"name": "llama", "gpu": 1}, 'gpu = 1, but its class "default" has 0 GPUs per pod'),
        (
            {"name": "x", "placementClass": "tpu"},
            'placementClass = "tpu", must be one of runtime.pools: default, gpu1',
        ),
        # Accepted and dropped before: now refused, saying what to do instead.
        ({"name": "x", "imageUri": "s3://bucket/x/"}, "imageUri is not supported"),
        (
            {"name": "x", "instanceType": "g6e.xlarge"},
            "instanceType is not a chart value: pin an instance type with a placement class",
        ),
    ],
)
def test_a_model_its_class_cannot_run_is_refused(
    render: Render, model: dict[str, Any], words: str
) -> None:
    done = render(_with_models(model), check=False)
    assert done.returncode != 0 and words in done.stderr, done.stderr


def test_pools_need_a_default_class(render: Render) -> None:
    # values.yaml's `default` merges into any pools given; only an explicit null removes it.
    values = {
        **VALUES,
        "models": [],
        "runtime": {"pools": {"default": None, "gpu1": VALUES["runtime"]["pools"]["gpu1"]}},
    }
    done = render(values, check=False)
    assert done.returncode != 0 and "runtime.pools must have a class named `default`" in done.stderr


def test_the_node_cache_budget_reaches_every_runtime_pod(render: Render) -> None:
    for name, pool in _pools(render(VALUES)).items():
        (container,) = pool["spec"]["template"]["spec"]["containers"]
        assert f"--cache-max-bytes={VALUES['nodeCache']['maxBytes']}" in container["args"], name
    unbounded = _pools(render({**VALUES, "nodeCache": {"maxBytes": 0}}))
    for pool in unbounded.values():
        (container,) = pool["spec"]["template"]["spec"]["containers"]
        assert not [a for a in container["args"] if a.startswith("--cache-max-bytes")]


def test_runtime_pods_parse_their_args_with_thaw_serve(render: Render) -> None:
    from runtime.process.cli import build_config
    from thaw.cli import build_parser

    for name, pool in _pools(render(VALUES)).items():
        (container,) = pool["spec"]["template"]["spec"]["containers"]
        config = build_config(build_parser("serve").parse_args(as_mounted(container["args"])))
        assert config.port == 8000, name


def test_each_class_has_a_prefetcher_on_its_own_nodes(render: Render) -> None:
    objects = render(VALUES)
    daemons = {
        o["metadata"]["labels"]["thaw.dev/placement-class"]: o["spec"]["template"]["spec"]
        for o in objects
        if o["kind"] == "DaemonSet"
    }
    assert set(daemons) == set(VALUES["runtime"]["pools"])
    for name, spec in daemons.items():
        assert spec["nodeSelector"] == VALUES["runtime"]["pools"][name]["nodeSelector"], name
