"""What a first `terraform apply` does, in order, and what the nodes it makes do at boot:

- the order of the apply, read from the modules' dependencies (python-hcl2): the Helm release of
  the platform comes after the whole cluster (Karpenter, its NodePools, the device plugin) and the
  identities, and its timeout covers what it waits for;
- the vpc-cni add-on configuration as Terraform renders it (`terraform plan` of the provider-free
  cluster_addons module): the network-policy agent is on;
- the boot order of an AL2023 GPU node, as systemd would order the units the gpu_nodes module
  installs (`terraform plan`, then the unit files parsed and ordered): the node cache is bound
  after nodeadm's local-disk setup and before kubelet, not merely "a script that mentions it".
"""

from __future__ import annotations

import configparser
import json
import re
import tomllib
from collections.abc import Iterable
from graphlib import TopologicalSorter
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.terraform_tree import TERRAFORM_ROOT, TerraformCli, expression, module

# --- the order of a first apply -----------------------------------------------------------------


def _references(body: Any) -> set[str]:
    """Addresses (`module.x`, `helm_release.y`) a block's expressions and depends_on name."""
    text = json.dumps(body)
    found = set(re.findall(r"\bmodule\.(\w+)", text))
    refs = {f"module.{m}" for m in found}
    refs |= {f"helm_release.{r}" for r in re.findall(r"\bhelm_release\.(\w+)", text)}
    return refs


def _graph(mod_name: str) -> dict[str, set[str]]:
    """address -> the addresses it waits for, inside one module."""
    mod = module(mod_name)
    graph: dict[str, set[str]] = {}
    for name, body in mod.module_calls.items():
        graph[f"module.{name}"] = _references(body) - {f"module.{name}"}
    for (rtype, rname), body in mod.resources().items():
        graph[f"{rtype}.{rname}"] = _references(body) - {f"{rtype}.{rname}"}
    return graph


def _before(graph: dict[str, set[str]], later: str) -> set[str]:
    """Everything `later` waits for, transitively."""
    seen: set[str] = set()
    todo = list(graph.get(later, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen


def test_the_platform_release_waits_for_the_whole_cluster_and_the_identities() -> None:
    example = _graph("examples/complete")
    assert {"module.cluster", "module.identity", "module.images_bucket"} <= _before(
        example, "module.platform"
    )
    call = module("examples/complete").module_calls["platform"]
    # depends_on a module waits for every resource in it, not only the outputs read.
    assert {"${module.cluster}", "${module.identity}"} <= set(call["depends_on"])
    cluster = _graph("modules/cluster")
    everything = set(cluster)
    assert {
        "module.eks",
        "module.karpenter",
        "helm_release.karpenter",
        "helm_release.node_pools",
        "helm_release.nvidia_device_plugin",
    } <= everything


def test_inside_the_cluster_karpenter_comes_before_its_pools_and_after_the_nodes() -> None:
    cluster = _graph("modules/cluster")
    assert {"module.eks", "module.karpenter"} <= _before(cluster, "helm_release.karpenter")
    # The NodePools are custom resources: the Karpenter chart must have installed the CRDs.
    assert "helm_release.karpenter" in _before(cluster, "helm_release.node_pools")
    assert "module.eks" in _before(cluster, "helm_release.nvidia_device_plugin")
    order = list(TopologicalSorter(cluster).static_order())
    assert (
        order.index("module.eks")
        < order.index("helm_release.karpenter")
        < order.index("helm_release.node_pools")
    )


def test_every_release_waits_and_the_platforms_timeout_covers_a_first_install() -> None:
    cluster = module("modules/cluster").resources()
    for name in ("karpenter", "node_pools", "nvidia_device_plugin"):
        release = cluster[("helm_release", name)]
        assert release["wait"] is True and release["atomic"] is True, name
    platform = module("modules/platform")
    release = platform.resources()[("helm_release", "thaw")]
    assert release["wait"] is True and expression(release["timeout"]) == "var.timeout_s"
    timeout = platform.variables["timeout_s"]["default"]
    # A CPU node from Karpenter (~1-2 min), the CPU image (~1-2 min), the repository copy (the
    # chart's s3Sync timeout, 600 s) and the startup probes fit; a GPU node is never waited for.
    assert timeout >= 1200
    chart_values = module("modules/chart_values").variables["runtime"]["type"]
    assert re.search(r"gpu_pool_replicas\s*=\s*optional\(number,\s*0\)", str(chart_values))


def test_the_readme_says_what_a_first_apply_does_in_order_and_how_long_it_takes() -> None:
    text = (TERRAFORM_ROOT / "README.md").read_text()
    heading = "## What a first apply does, in order, and how long it takes"
    assert heading in text
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    steps = ["control plane", "system node group", "Karpenter", "NodePools", "device plugin"]
    positions = [section.find(step) for step in steps]
    assert -1 not in positions and positions == sorted(positions), positions
    assert "minutes" in section


# --- vpc-cni ------------------------------------------------------------------------------------


def test_vpc_cni_is_rendered_with_network_policy_enforced(
    terraform: TerraformCli, tmp_path: Path
) -> None:
    defaults = tmp_path / "defaults.tfvars"
    defaults.write_text("")
    outputs = terraform.planned_outputs(TERRAFORM_ROOT / "modules/cluster_addons", defaults)
    vpc_cni = outputs["addons"]["vpc-cni"]
    configuration = json.loads(vpc_cni["configuration_values"])
    assert configuration["enableNetworkPolicy"] == "true"  # a string: the add-on's schema
    assert vpc_cni["before_compute"] is True
    assert expression(module("modules/cluster").module_calls["eks"]["addons"]) == (
        "module.addons.addons"
    )


# --- AL2023 boot order --------------------------------------------------------------------------

# The AMI's own units, as they ship (awslabs/amazon-eks-ami,
# templates/al2023/runtime/rootfs/etc/systemd/system/setup-local-disks.service): nodeadm's config
# phase writes the strategy into a drop-in of this unit; the unit builds and mounts the array.
SETUP_LOCAL_DISKS = """\
[Unit]
Description=Setup local instance storage for use by kubelet, containerd
Before=containerd.service kubelet.service

[Service]
Type=oneshot
Environment=LOCAL_DISK_STRATEGY=none
ExecStart=/usr/bin/setup-local-disks $LOCAL_DISK_STRATEGY

[Install]
WantedBy=multi-user.target
"""
KUBELET = """\
[Unit]
Description=Kubernetes Kubelet
After=containerd.service
Wants=containerd.service

[Service]
ExecStart=/usr/bin/kubelet
"""
CONTAINERD = """\
[Unit]
Description=containerd

[Service]
ExecStart=/usr/bin/containerd

[Install]
WantedBy=multi-user.target
"""


def _unit(text: str) -> dict[str, dict[str, list[str]]]:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    return {
        section: {key: value.split() for key, value in parser[section].items()}
        for section in parser.sections()
    }


def _boot_order(
    units: dict[str, str], enabled: Iterable[str], start: list[str]
) -> dict[str, set[str]]:
    """The ordering systemd applies to one transaction: the jobs `start` pulls in (Wants=,
    Requires=, and the enabled units' WantedBy=/RequiredBy=), each with the jobs it must wait
    for (After=, and the others' Before=)."""
    parsed = {name: _unit(text) for name, text in units.items()}
    wants: dict[str, set[str]] = {name: set() for name in parsed}
    for name, unit in parsed.items():
        for key in ("Wants", "Requires"):
            wants[name] |= set(unit.get("Unit", {}).get(key, []))
    for name in enabled:
        for key in ("WantedBy", "RequiredBy"):
            for target in parsed[name].get("Install", {}).get(key, []):
                wants.setdefault(target, set()).add(name)
    jobs: set[str] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        if name not in jobs:
            jobs.add(name)
            todo.extend(wants.get(name, ()))
    after: dict[str, set[str]] = {name: set() for name in jobs}
    for name in jobs:
        unit = parsed.get(name, {}).get("Unit", {})
        after[name] |= set(unit.get("After", [])) & jobs
        for later in set(unit.get("Before", [])) & jobs:
            after[later].add(name)
    TopologicalSorter(after).prepare()  # raises on an ordering cycle, as systemd would refuse
    return after


def _forced_before(after: dict[str, set[str]], first: str, then: str) -> bool:
    """True when the ordering itself puts `first` before `then` (not a lucky sort)."""
    return first in _before(after, then)


@pytest.fixture(scope="module")
def al2023(module_terraform: Any) -> dict[str, Any]:
    terraform = module_terraform("gpu-nodes-boot")
    defaults = terraform.data_dir.parent / "defaults.tfvars"
    defaults.write_text("")
    return terraform.planned_outputs(TERRAFORM_ROOT / "modules/gpu_nodes", defaults)


def test_the_cache_is_bound_after_the_array_and_before_kubelet(al2023: dict[str, Any]) -> None:
    units = {
        "setup-local-disks.service": SETUP_LOCAL_DISKS,
        "kubelet.service": KUBELET,
        "containerd.service": CONTAINERD,
        "thaw-node-cache.service": al2023["node_cache_unit"],
    }
    enabled = ["setup-local-disks.service", "containerd.service", "thaw-node-cache.service"]
    # The boot transaction (multi-user.target) and nodeadm's run phase starting kubelet alone:
    # either way the array is assembled, then the cache bound, then kubelet started.
    units["multi-user.target"] = "[Unit]\nDescription=boot\n"
    for start in (["multi-user.target", "kubelet.service"], ["kubelet.service"]):
        after = _boot_order(units, enabled, start)
        assert "thaw-node-cache.service" in after, f"{start}: the unit is not pulled in"
        assert _forced_before(after, "thaw-node-cache.service", "kubelet.service"), after
        if "setup-local-disks.service" in after:
            assert _forced_before(after, "setup-local-disks.service", "thaw-node-cache.service")


def test_the_cache_unit_never_reruns_the_local_disk_setup(al2023: dict[str, Any]) -> None:
    unit = _unit(al2023["node_cache_unit"])["Unit"]
    assert "setup-local-disks.service" in unit["After"]
    assert "setup-local-disks.service" not in unit.get("Wants", []) + unit.get("Requires", [])
    service = _unit(al2023["node_cache_unit"])["Service"]
    assert service["Type"] == ["oneshot"] and service["RemainAfterExit"] == ["yes"]
    # What the unit runs is what the user data installs at that path.
    (path,) = service["ExecStart"]
    assert (
        f"cat > {path} <<'SCRIPT'\n{al2023['node_cache_script']}SCRIPT"
        in (al2023["user_data_script"])
    )


def test_the_cached_directory_belongs_to_the_runtimes_user(al2023: dict[str, Any]) -> None:
    script = al2023["node_cache_script"]
    lines = [line.strip() for line in script.splitlines()]
    assert 'chown "10001:10001" "$cache"' in lines
    # After the bind: the mount point's owner is what the pods see.
    assert lines.index('chown "10001:10001" "$cache"') > next(
        i for i, line in enumerate(lines) if line.startswith("mount --bind")
    )


def test_bottlerocket_binds_the_cache_with_kubelets_own_directories(
    module_terraform: Any, tmp_path: Path
) -> None:
    terraform = module_terraform("gpu-nodes-bottlerocket")
    var_file = tmp_path / "br.tfvars"
    var_file.write_text('ami_type = "BOTTLEROCKET_x86_64_NVIDIA"\n')
    outputs = terraform.planned_outputs(TERRAFORM_ROOT / "modules/gpu_nodes", var_file)
    settings = tomllib.loads(outputs["user_data"])
    command = settings["settings"]["bootstrap-commands"]["thaw-ephemeral-storage"]
    init, bind = command["commands"]
    assert init == ["apiclient", "ephemeral-storage", "init"]
    assert bind[:4] == ["apiclient", "ephemeral-storage", "bind", "--dirs"]
    assert {"/var/lib/kubelet", "/mnt/thaw-cache"} <= set(bind[4:])
    assert command["essential"] is True and command["mode"] == "always"
