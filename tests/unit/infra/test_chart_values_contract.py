"""The chart values the platform module gives the Helm chart follow the contract
(modules/platform/CHART_VALUES.md): rendered by `terraform plan` of the provider-free
chart_values module with the example's models, every emitted key exists in the contract with the
contract's type. Once deploy/helm/thaw exists, its values.yaml is checked the same way."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
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


def mismatches(emitted: object, contract: object, path: str = "") -> Iterator[str]:
    """Every place where `emitted` has a key the contract lacks, or a value of another type.
    Maps the contract leaves empty (`nodeSelector: {}`, `annotations: {}`) take any string
    keys; lists are checked element by element against the contract's first element."""
    if _kind(emitted) != _kind(contract):
        yield f"{path or '.'}: {_kind(emitted)} where the contract has {_kind(contract)}"
        return
    if isinstance(emitted, dict) and isinstance(contract, dict):
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
        assert entry["instanceType"] == model.get("instance_type", "")
        if "max_replicas" in model:
            assert entry["maxReplicas"] == model["max_replicas"]
        params = rendered["thaw_parameters"][model["name"]]
        assert params["thaw.max_replicas"] == str(entry["maxReplicas"])
        assert params["thaw.target_concurrency"] == str(entry["targetConcurrency"])


def test_gpu_scheduling_is_the_contracts(rendered: dict[str, Any]) -> None:
    gpu = rendered["values"]["runtime"]["gpu"]
    contract_gpu = contract_values()["runtime"]["gpu"]
    assert gpu["tolerations"] == contract_gpu["tolerations"]
    assert gpu["nodeSelector"] == contract_gpu["nodeSelector"]
    assert gpu["enabled"] is True, "the example has GPU models"
    for name, endpoint in rendered["endpoints"].items():
        if endpoint["gpu"] > 0:
            assert endpoint["tolerations"] == contract_gpu["tolerations"], name
        else:
            assert endpoint["tolerations"] == [], name


def test_images_are_the_contracts_repositories(rendered: dict[str, Any]) -> None:
    contract = contract_values()
    assert rendered["values"]["image"]["repository"] == contract["image"]["repository"]
    assert rendered["values"]["imageGpu"]["repository"] == contract["imageGpu"]["repository"]


def test_chart_values_yaml_accepts_what_terraform_emits(rendered: dict[str, Any]) -> None:
    if not CHART_VALUES_YAML.is_file():
        pytest.skip(
            "deploy/helm/thaw/values.yaml is not in this tree yet (the chart is built in "
            "parallel); this check runs once it is"
        )
    chart = yaml.safe_load(CHART_VALUES_YAML.read_text())
    problems = list(mismatches(rendered["values"], chart))
    assert not problems, "\n".join(problems)
