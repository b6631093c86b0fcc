"""infra/terraform through the terraform CLI, offline: formatting, `terraform test` of the
provider-free modules, `terraform validate` (provider modules only where their providers are
already on this machine), and the rendered node-cache script. Skipped without a terraform binary."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.terraform_tree import (
    TERRAFORM_ROOT,
    TerraformCli,
    module,
    provider_plugin_dirs,
)

PROVIDER_FREE = [
    "modules/gpu_nodes",
    "modules/model_endpoints",
    "modules/chart_values",
    "modules/node_pools",
    "modules/cluster_addons",
]
WITH_PROVIDERS = [
    "modules/cluster",
    "modules/images_bucket",
    "modules/identity",
    "modules/platform",
    "examples/complete",
]


def test_fmt_check_is_clean(terraform: TerraformCli) -> None:
    proc = terraform.run(TERRAFORM_ROOT, "fmt", "-check", "-recursive", "-diff")
    assert proc.returncode == 0, f"terraform fmt would change:\n{proc.stdout}{proc.stderr}"


def _init(terraform: TerraformCli, mod_dir: Path) -> None:
    proc = terraform.run(mod_dir, "init", "-input=false", "-backend=false")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", PROVIDER_FREE)
def test_terraform_test_passes(terraform: TerraformCli, name: str) -> None:
    mod_dir = TERRAFORM_ROOT / name
    _init(terraform, mod_dir)
    proc = terraform.run(mod_dir, "test")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    counts = re.search(r"(\d+) passed, (\d+) failed", out)
    assert counts, out
    runs = len(
        re.findall(
            r"^\s*run\s+\"",
            "".join(p.read_text() for p in (mod_dir / "tests").glob("*.tftest.hcl")),
            re.M,
        )
    )
    assert int(counts.group(1)) == runs > 0 and counts.group(2) == "0", out


@pytest.mark.parametrize("name", PROVIDER_FREE)
def test_provider_free_module_validates(terraform: TerraformCli, name: str) -> None:
    mod_dir = TERRAFORM_ROOT / name
    _init(terraform, mod_dir)
    proc = terraform.run(mod_dir, "validate")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _providers_present(providers: list[str]) -> list[str]:
    """The providers of `providers` not found in any local plugin directory."""
    dirs = provider_plugin_dirs()
    return [
        p
        for p in providers
        if not any((d / "registry.terraform.io" / "hashicorp" / p).is_dir() for d in dirs)
    ]


@pytest.mark.parametrize("name", WITH_PROVIDERS)
def test_module_with_providers_validates(terraform: TerraformCli, name: str) -> None:
    providers = sorted(module(name).required_providers)
    missing = _providers_present(providers)
    if missing:
        pytest.skip(
            f"terraform validate of {name} needs the {', '.join(missing)} provider(s), which are "
            "not in TF_PLUGIN_CACHE_DIR or a local plugin mirror and cannot be downloaded here; "
            "it runs where they are present"
        )
    mod_dir = TERRAFORM_ROOT / name
    _init(terraform, mod_dir)
    proc = terraform.run(mod_dir, "validate")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_al2023_node_cache_scripts_are_valid_bash(terraform: TerraformCli, tmp_path: Path) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash to check the script with")
    var_file = tmp_path / "gpu.tfvars"
    var_file.write_text('node_cache_host_path = "/mnt/thaw-cache"\n')
    outputs = terraform.planned_outputs(TERRAFORM_ROOT / "modules/gpu_nodes", var_file)
    for name in ("user_data_script", "node_cache_script"):
        path = tmp_path / f"{name}.sh"
        path.write_text(outputs[name])
        proc = subprocess.run([bash, "-n", str(path)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, f"{name}: {proc.stderr}"
        assert outputs[name].startswith("#!/usr/bin/env bash\n"), name
