"""The chart values the platform module gives the Helm chart follow the contract
(modules/platform/CHART_VALUES.md): rendered by `terraform plan` of the provider-free
chart_values module with the example's models, every emitted key exists in the contract with the
contract's type. Once deploy/helm/thaw exists, its values.yaml is checked the same way; and the
emitted values render with the chart into pools that place each model where it can run."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hcl2
import pytest
import yaml

from tests.fixtures.terraform_tree import (
    REPO_ROOT,
    TERRAFORM_ROOT,
    TerraformCli,
    contract_values,
)

CHART_VALUES_YAML = REPO_ROOT / "deploy" / "helm" / "thaw" / "values.yaml"
EXAMPLE_TFVARS = TERRAFORM_ROOT / "examples" / "complete" / "terraform.tfvars.example"


def _kind(value: object) -> str:
    """The YAML type a chart template sees: numbers are one kind (8 and 0.5 are both numbers)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    if value is None:
        return "null"
    raise TypeError(type(value))


# Maps keyed by a name of the user's choosing: every entry is checked against the contract's one
# example entry (`runtime.pools.default`).
KEYED_MAPS = {"runtime.pools": "default"}


def mismatches(emitted: object, contract: object, path: str = "") -> Iterator[str]:
    """Every place where `emitted` has a key the contract lacks, or a value of another type.
    Maps the contract leaves empty (`nodeSelector: {}`, `annotations: {}`) take any string
    keys; lists are checked element by element against the contract's first element; the maps
    of KEYED_MAPS entry by entry against their example entry."""
    if _kind(emitted) != _kind(contract):
        yield f"{path or '.'}: {_kind(emitted)} where the contract has {_kind(contract)}"
        return
    if isinstance(emitted, dict) and isinstance(contract, dict) and path in KEYED_MAPS:
        for key, value in emitted.items():
            yield from mismatches(value, contract[KEYED_MAPS[path]], f"{path}.{key}")
    elif isinstance(emitted, dict) and isinstance(contract, dict):
        for key, value in emitted.items():
            where = f"{path}.{key}" if path else key
            if not contract:
                if not isinstance(value, str):
                    yield f"{where}: {_kind(value)} in a map of strings"
            elif key not in contract:
                yield f"{where}: not a key of the contract"
            else:
                yield from mismatches(value, contract[key], where)
    elif isinstance(emitted, list) and isinstance(contract, list) and contract:
        for i, item in enumerate(emitted):
            yield from mismatches(item, contract[0], f"{path}[{i}]")


def _example_models() -> list[dict[str, Any]]:
    tfvars = hcl2.loads(
        EXAMPLE_TFVARS.read_text(),
        serialization_options=hcl2.SerializationOptions(
            with_comments=False, strip_string_quotes=True, explicit_blocks=False
        ),
    )
    models = tfvars["models"]
    assert isinstance(models, list)
    return models


@pytest.fixture(scope="module")
def rendered(module_terraform: Callable[[str], TerraformCli]) -> dict[str, Any]:
    """The chart_values module's outputs for the example's models and an S3 repository."""
    terraform = module_terraform("chart-values")
    var_file = terraform.data_dir.parent / "example.tfvars.json"
    var_file.write_text(
        json.dumps(
            {
                "models": _example_models(),
                "model_repository": {"source": "s3", "s3_uri": "s3://thaw-test/repository/"},
                "images_store_uri": "s3://thaw-test/images/",
                "images_region": "us-east-1",
                "image": {"tag": "0.1.0"},
                "gpu_instance_types": ["g6.xlarge", "g6e.xlarge"],
                "cpu_instance_types": ["m6i.large"],
                "node_class_selectors": {
                    "cpu": {"thaw.dev/node-class": "cpu"},
                    "gpu": {"thaw.dev/node-class": "gpu"},
                },
            }
        )
    )
    return terraform.planned_outputs(TERRAFORM_ROOT / "modules" / "chart_values", var_file)


def test_contract_has_the_chart_sections() -> None:
    assert set(contract_values()) == {
        "image",
        "imageGpu",
        "serviceAccount",
        "activator",
        "runtime",
        "modelRepository",
        "images",
        "nodeCache",
        "models",
        "metrics",
        "networkPolicy",
    }


def test_mismatches_catches_unknown_keys_and_wrong_types() -> None:
    # The comparator is the test's eye: it must see a stray key and a type change.
    contract = {"a": {"b": 1, "m": {}}, "l": [{"k": "v"}]}
    assert list(mismatches({"a": {"b": 2.5, "m": {"x": "y"}}, "l": []}, contract)) == []
    assert list(mismatches({"a": {"c": 1}}, contract)) == ["a.c: not a key of the contract"]
    assert list(mismatches({"a": {"b": "1"}}, contract)) == [
        "a.b: string where the contract has number"
    ]
    assert list(mismatches({"l": [{"k": True}]}, contract)) == [
        "l[0].k: bool where the contract has string"
    ]
    assert list(mismatches({"a": {"m": {"x": 1}}}, contract)) == [
        "a.m.x: number in a map of strings"
    ]


def test_emitted_values_are_contract_keys_with_contract_types(rendered: dict[str, Any]) -> None:
    problems = list(mismatches(rendered["values"], contract_values()))
    assert not problems, "\n".join(problems)


def test_values_yaml_is_the_values(rendered: dict[str, Any]) -> None:
    assert yaml.safe_load(rendered["values_yaml"]) == rendered["values"]


def test_every_model_entry_carries_every_contract_model_key(rendered: dict[str, Any]) -> None:
    contract_keys = set(contract_values()["models"][0])
    models = rendered["values"]["models"]
    assert [m["name"] for m in models] == [m["name"] for m in _example_models()]
    for entry in models:
        assert set(entry) == contract_keys, entry["name"]


def test_example_models_map_to_their_settings(rendered: dict[str, Any]) -> None:
    by_name = {m["name"]: m for m in rendered["values"]["models"]}
    for model in _example_models():
        entry = by_name[model["name"]]
        assert entry["gpu"] == model.get("gpu", 0)
        assert entry["hot"] == model.get("hot", False)
        expected_class = (
            f"gpu{model['gpu']}"
            if model.get("gpu", 0)
            else "cpu"
            if model.get("instance_type")
            else "default"
        ) + (f"-{model['instance_type'].replace('.', '-')}" if model.get("instance_type") else "")
        assert entry["placementClass"] == expected_class
        if "max_replicas" in model:
            assert entry["maxReplicas"] == model["max_replicas"]
        params = rendered["thaw_parameters"][model["name"]]
        assert params["thaw.max_replicas"] == str(entry["maxReplicas"])
        assert params["thaw.target_concurrency"] == str(entry["targetConcurrency"])


def test_every_model_has_a_pool_that_fits_it(rendered: dict[str, Any]) -> None:
    pools = rendered["values"]["runtime"]["pools"]
    gpu_toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert "default" in pools and pools["default"]["gpu"] == 0
    for model in rendered["values"]["models"]:
        pool = pools[model["placementClass"]]
        if model["gpu"] == 0:  # a CPU model never takes a GPU pod
            assert pool["gpu"] == 0 and gpu_toleration not in pool["tolerations"], model["name"]
            assert "nvidia.com/gpu.present" not in pool["nodeSelector"], model["name"]
        else:
            assert pool["gpu"] >= model["gpu"] and gpu_toleration in pool["tolerations"]
            assert pool["nodeSelector"]["nvidia.com/gpu.present"] == "true", model["name"]
    llama = pools["gpu1-g6e-xlarge"]
    assert llama["nodeSelector"]["node.kubernetes.io/instance-type"] == "g6e.xlarge"
    # A warm GPU pod is a GPU-hour per hour: none unless asked for.
    assert all(p["replicas"] == 0 for p in pools.values() if p["gpu"] > 0)


def test_the_chart_renders_one_pool_per_class_from_terraforms_values(
    rendered: dict[str, Any], tmp_path: Path
) -> None:
    helm = REPO_ROOT / ".tools" / "bin" / "helm"
    if not helm.is_file():
        pytest.skip("helm is not installed here: run `make tools`")
    values = tmp_path / "values.yaml"
    values.write_text(rendered["values_yaml"])
    chart = str(CHART_VALUES_YAML.parent)
    done = subprocess.run(
        [str(helm), "template", "thaw", chart, "-n", "thaw", "-f", str(values)],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "HELM_CACHE_HOME": str(tmp_path), "HELM_CONFIG_HOME": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    objects = [o for o in yaml.safe_load_all(done.stdout) if o]
    pools = {
        o["metadata"]["labels"]["thaw.dev/placement-class"]: o
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["name"].startswith("thaw-pool")
    }
    assert set(pools) == set(rendered["values"]["runtime"]["pools"])
    (activator,) = [
        o
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "thaw-activator"
    ]
    args = activator["spec"]["template"]["spec"]["containers"][0]["args"]
    for name, pool in pools.items():
        flag = f"--pool-class={name}={pool['metadata']['name']}"
        assert (flag in args) == (name != "default"), flag
        (container,) = pool["spec"]["template"]["spec"]["containers"]
        gpus = container["resources"].get("limits", {}).get("nvidia.com/gpu", 0)
        assert gpus == rendered["values"]["runtime"]["pools"][name]["gpu"], name
        assert ("thaw-cuda" in container["image"]) == (gpus > 0), name
    settings = json.loads(
        next(o for o in objects if o["metadata"]["name"] == "thaw-models")["data"]["models.json"]
    )["models"]
    for model in rendered["values"]["models"]:
        assert settings[model["name"]]["thaw.placement_class"] == model["placementClass"]


def test_images_are_the_contracts_repositories(rendered: dict[str, Any]) -> None:
    contract = contract_values()
    for key in ("image", "imageGpu"):
        for field in ("registry", "repository", "tag", "digest", "pullPolicy", "pullSecrets"):
            assert rendered["values"][key][field] == contract[key][field], (key, field)


def test_chart_values_yaml_accepts_what_terraform_emits(rendered: dict[str, Any]) -> None:
    if not CHART_VALUES_YAML.is_file():
        pytest.skip(
            "deploy/helm/thaw/values.yaml is not in this tree yet (the chart is built in "
            "parallel); this check runs once it is"
        )
    chart = yaml.safe_load(CHART_VALUES_YAML.read_text())
    problems = list(mismatches(rendered["values"], chart))
    assert not problems, "\n".join(problems)
