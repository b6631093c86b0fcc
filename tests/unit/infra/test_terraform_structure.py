"""infra/terraform read as HCL (python-hcl2): every input typed, described, used and validated
where it has rules; outputs declared; versions pinned; the images bucket hardened; the activator's
rights namespaced; GPU taints and tolerations wired from one module into both the node group and
the chart values. Needs no terraform binary and no provider."""

from __future__ import annotations

import re
from typing import Any

import hcl2
import pytest

from tests.fixtures.terraform_tree import (
    CONTRACT_PATH,
    TERRAFORM_ROOT,
    Module,
    all_modules,
    contract_values,
    expression,
    module,
    readmes,
)

MODULES = all_modules()
MODULE_IDS = [m.name for m in MODULES]
PROVIDER_FREE = [
    "modules/gpu_nodes",
    "modules/model_endpoints",
    "modules/chart_values",
    "modules/node_pools",
    "modules/cluster_addons",
]
VARIABLES = [(m, name) for m in MODULES for name in m.variables]
VARIABLE_IDS = [f"{m.name}:{name}" for m, name in VARIABLES]
# A description that states a rule ("must be ...", "one of ...") promises a validation block.
RULE_WORDS = re.compile(r"\bmust\b|\bone of\b", re.I)


def _by_name(name: str) -> Module:
    return next(m for m in MODULES if m.name == name)


def test_tree_has_the_issue_modules() -> None:
    names = set(MODULE_IDS)
    assert {
        "modules/cluster",
        "modules/images_bucket",
        "modules/identity",
        "modules/platform",
        "examples/complete",
        *PROVIDER_FREE,
    } <= names


@pytest.mark.parametrize("mod", MODULES, ids=MODULE_IDS)
def test_module_has_the_standard_files(mod: Module) -> None:
    for file in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
        assert (mod.path / file).is_file(), f"{mod.name} lacks {file}"


@pytest.mark.parametrize(("mod", "name"), VARIABLES, ids=VARIABLE_IDS)
def test_variable_is_typed_and_described(mod: Module, name: str) -> None:
    body = mod.variables[name]
    # python-hcl2 gives a primitive type as its bare keyword, a collection as `${...}`.
    type_ = expression(body.get("type")) or str(body.get("type", ""))
    assert type_, f"{mod.name}: variable {name} has no type"
    assert not re.search(r"\bany\b", type_), f"{mod.name}: variable {name} is typed `any`"
    description = str(body.get("description", "")).strip()
    assert len(description) >= 15, f"{mod.name}: variable {name} needs a description"


@pytest.mark.parametrize(("mod", "name"), VARIABLES, ids=VARIABLE_IDS)
def test_variable_is_used(mod: Module, name: str) -> None:
    # Use outside variables.tf: a variable read only by its own validation does nothing.
    assert re.search(rf"\bvar\.{name}\b", mod.text(without=("variables.tf",))), (
        f"{mod.name}: variable {name} is declared but never used"
    )


def _preconditions(mod: Module) -> list[str]:
    """The `condition` of every output and resource precondition of the module."""
    bodies = [*mod.outputs.values(), *mod.resources().values()]
    found = [p["condition"] for b in bodies for p in b.get("precondition", [])]
    found += [
        p["condition"]
        for b in mod.resources().values()
        for lifecycle in b.get("lifecycle", [])
        for p in lifecycle.get("precondition", [])
    ]
    return [str(c) for c in found]


def _reads(mod: Module, expression_text: str, name: str) -> bool:
    """True if the expression reads `var.name`, directly or through the locals it uses."""
    if re.search(rf"\bvar\.{name}\b", expression_text):
        return True
    used = set(re.findall(r"\blocal\.(\w+)", expression_text))
    return any(re.search(rf"\bvar\.{name}\b", str(mod.locals.get(local))) for local in used)


def _validated(mod: Module, name: str) -> bool:
    """True if `name` has a validation block here, is read by a precondition (cross-input
    rules), or is forwarded verbatim (`name = var.name`) to a local submodule whose same-named
    variable is validated."""
    if mod.variables[name].get("validation"):
        return True
    if any(_reads(mod, condition, name) for condition in _preconditions(mod)):
        return True
    for call, target in mod.local_calls().items():
        for argument, value in mod.module_calls[call].items():
            forwarded = expression(value) == f"var.{name}" and argument in target.variables
            if forwarded and _validated(target, argument):
                return True
    return False


RULED = [(m, n) for m, n in VARIABLES if RULE_WORDS.search(str(m.variables[n]["description"]))]


@pytest.mark.parametrize(("mod", "name"), RULED, ids=[f"{m.name}:{n}" for m, n in RULED])
def test_variable_with_rules_is_validated(mod: Module, name: str) -> None:
    assert _validated(mod, name), (
        f"{mod.name}: variable {name}'s description states a rule, "
        "but neither it nor the submodule it feeds checks it"
    )


@pytest.mark.parametrize(("mod", "name"), VARIABLES, ids=VARIABLE_IDS)
def test_validation_errors_name_their_input(mod: Module, name: str) -> None:
    # One error form everywhere: "`name` = value, must be ...".
    for rule in mod.variables[name].get("validation", []):
        message = str(rule["error_message"])
        assert message.startswith(f"`{name}"), f"{mod.name}: {name}: {message!r}"
        assert "must" in message, f"{mod.name}: {name}: {message!r} does not state the rule"


def test_forwarded_rules_are_checked_somewhere() -> None:
    # Guard against the rule above passing vacuously: these inputs carry the issue's rules.
    must_validate = {
        "modules/model_endpoints": ["models", "defaults", "gpu_instance_types"],
        "modules/gpu_nodes": ["ami_type", "node_cache_host_path"],
        "modules/platform": ["models", "model_repository", "images_store_uri", "release_name"],
        "modules/cluster": [
            "name",
            "subnet_ids",
            "enabled_log_types",
            "gpu_node_pool",
            "cpu_node_pool",
            "consolidate_after",
            "kubernetes_version",
        ],
        "modules/node_pools": ["gpu", "cpu", "consolidate_after", "subnet_ids"],
        "modules/identity": ["namespace", "images_bucket_arn", "service_accounts"],
        "modules/images_bucket": ["bucket_name", "repository_prefix"],
        "examples/complete": ["region", "name", "models", "vpc_id"],
    }
    for name, variables in must_validate.items():
        mod = _by_name(name)
        for variable in variables:
            assert _validated(mod, variable), f"{name}: {variable} is not validated"


@pytest.mark.parametrize("mod", MODULES, ids=MODULE_IDS)
def test_outputs_are_declared_and_described(mod: Module) -> None:
    assert mod.outputs, f"{mod.name} declares no outputs"
    for name, body in mod.outputs.items():
        assert len(str(body.get("description", "")).strip()) >= 15, f"{mod.name}: output {name}"
        assert "value" in body, f"{mod.name}: output {name} has no value"


@pytest.mark.parametrize("mod", MODULES, ids=MODULE_IDS)
def test_readme_lists_every_input_and_output(mod: Module) -> None:
    readme = (mod.path / "README.md").read_text()
    missing = [n for n in [*mod.variables, *mod.outputs] if f"| `{n}` |" not in readme]
    assert not missing, f"{mod.name}/README.md does not list {missing}"


def test_readme_tables_are_current() -> None:
    stale = [
        str(path.relative_to(TERRAFORM_ROOT))
        for path, text in readmes().items()
        if path.read_text() != text
    ]
    assert not stale, f"README tables out of date ({stale}): run `make terraform-docs`"


@pytest.mark.parametrize("mod", MODULES, ids=MODULE_IDS)
def test_terraform_and_providers_are_pinned(mod: Module) -> None:
    required = str(mod.terraform_settings.get("required_version", ""))
    assert ">=" in required and "<" in required.replace("<=", "<"), (
        f"{mod.name}: required_version {required!r} needs a lower and an upper bound"
    )
    for name, spec in mod.required_providers.items():
        assert spec.get("source") == f"hashicorp/{name}", f"{mod.name}: {name} source"
        assert re.fullmatch(r"~> \d+\.\d+", str(spec.get("version", ""))), (
            f"{mod.name}: provider {name} must be pinned with ~> MAJOR.MINOR, not {spec!r}"
        )
    used = {
        rtype.split("_", 1)[0] for kind in ("resource", "data") for rtype, _ in mod.resources(kind)
    } | set(mod.labelled("provider"))
    assert used <= set(mod.required_providers), (
        f"{mod.name} uses providers {sorted(used - set(mod.required_providers))} "
        "its versions.tf does not pin"
    )
    for call, body in mod.module_calls.items():
        if not str(body["source"]).startswith(("./", "../")):
            assert re.fullmatch(r"~> \d+\.\d+", str(body.get("version", ""))), (
                f"{mod.name}: registry module {call} must be pinned with ~> MAJOR.MINOR"
            )


def test_provider_pins_agree_across_modules() -> None:
    pins: dict[str, set[str]] = {}
    for mod in MODULES:
        for name, spec in mod.required_providers.items():
            pins.setdefault(name, set()).add(str(spec["version"]))
    assert pins.keys() == {"aws", "helm", "kubernetes"}
    assert all(len(v) == 1 for v in pins.values()), pins


@pytest.mark.parametrize("name", PROVIDER_FREE)
def test_logic_modules_need_no_provider(name: str) -> None:
    mod = _by_name(name)
    assert not mod.required_providers
    assert not mod.resources("resource") and not mod.resources("data")
    for call, target in mod.local_calls().items():
        assert target.name in PROVIDER_FREE, f"{name} calls {call}, which needs a provider"
    assert all(str(b["source"]).startswith("../") for b in mod.module_calls.values())


# --- the images bucket --------------------------------------------------------------------------


def _bucket_resource(rtype: str) -> dict[str, Any]:
    return module("modules/images_bucket").resources()[(rtype, "images")]


def test_images_bucket_blocks_public_access() -> None:
    block = _bucket_resource("aws_s3_bucket_public_access_block")
    for setting in (
        "block_public_acls",
        "block_public_policy",
        "ignore_public_acls",
        "restrict_public_buckets",
    ):
        assert block[setting] is True, setting
    ownership = _bucket_resource("aws_s3_bucket_ownership_controls")
    assert ownership["rule"][0]["object_ownership"] == "BucketOwnerEnforced"


def test_images_bucket_policy_denies_plain_http() -> None:
    mod = module("modules/images_bucket")
    policy = _bucket_resource("aws_s3_bucket_policy")
    assert expression(policy["policy"]) == "data.aws_iam_policy_document.images.json"
    statements = mod.resources("data")[("aws_iam_policy_document", "images")]["statement"]
    tls = [
        s
        for s in statements
        if s.get("effect") == "Deny"
        and any(
            c["variable"] == "aws:SecureTransport" and c["values"] == ["false"]
            for c in s.get("condition", [])
        )
    ]
    assert tls, "no statement denies requests without TLS"
    assert tls[0]["actions"] == ["s3:*"]
    assert tls[0]["principals"][0]["identifiers"] == ["*"]
    assert len(tls[0]["resources"]) == 2, "the deny must cover the bucket and its objects"


def test_images_bucket_is_versioned_and_kms_encrypted() -> None:
    versioning = _bucket_resource("aws_s3_bucket_versioning")
    assert versioning["versioning_configuration"][0]["status"] == "Enabled"
    sse = _bucket_resource("aws_s3_bucket_server_side_encryption_configuration")["rule"][0]
    default = sse["apply_server_side_encryption_by_default"][0]
    assert default["sse_algorithm"] == "aws:kms"
    assert expression(default["kms_master_key_id"]) == "aws_kms_key.images.arn"
    key = module("modules/images_bucket").resources()[("aws_kms_key", "images")]
    assert key["enable_key_rotation"] is True


def test_images_bucket_lifecycle_cleans_uploads_and_old_versions() -> None:
    rules = _bucket_resource("aws_s3_bucket_lifecycle_configuration")["rule"]
    assert all(r["status"] == "Enabled" for r in rules)
    assert any("abort_incomplete_multipart_upload" in r for r in rules)
    assert any("noncurrent_version_expiration" in r for r in rules)


def test_images_bucket_logs_access_to_a_hardened_bucket() -> None:
    mod = module("modules/images_bucket")
    logging_ = _bucket_resource("aws_s3_bucket_logging")
    assert "aws_s3_bucket.access_logs" in expression(logging_["target_bucket"])
    resources = mod.resources()
    for rtype in (
        "aws_s3_bucket_public_access_block",
        "aws_s3_bucket_server_side_encryption_configuration",
        "aws_s3_bucket_lifecycle_configuration",
        "aws_s3_bucket_policy",
    ):
        assert (rtype, "access_logs") in resources, f"log bucket lacks {rtype}"


# --- identity -----------------------------------------------------------------------------------


def test_activator_rights_stop_at_its_namespace() -> None:
    mod = module("modules/identity")
    resources = mod.resources()
    assert not [r for r in resources if r[0].startswith("kubernetes_cluster_role")], (
        "no cluster-wide rights: the activator manages its own namespace only"
    )
    role = resources[("kubernetes_role_v1", "activator")]
    assert expression(role["metadata"][0]["namespace"]) == "local.ns"
    granted = {(tuple(r["api_groups"]), tuple(r["resources"])) for r in role["rule"]}
    assert granted == {
        (("",), ("pods",)),
        (("apps",), ("deployments",)),  # the warm pool's pod template (read only)
        (("coordination.k8s.io",), ("leases",)),
    }
    for rule in role["rule"]:
        assert "*" not in rule["verbs"]
    binding = resources[("kubernetes_role_binding_v1", "activator")]
    assert binding["role_ref"][0]["kind"] == "Role"
    assert expression(binding["subject"][0]["name"]) == "local.sa.activator"


def _policy_actions(document: str) -> dict[str, set[str]]:
    statements = module("modules/identity").resources("data")[
        ("aws_iam_policy_document", document)
    ]["statement"]
    actions: dict[str, set[str]] = {}
    for s in statements:
        for resource in s["resources"]:
            actions.setdefault(resource, set()).update(s["actions"])
    return actions


def test_runtime_reads_images_and_never_writes() -> None:
    actions = _policy_actions("runtime")
    everything = set().union(*actions.values())
    assert "s3:GetObject" in everything
    assert not {a for a in everything if re.match(r"s3:(Put|Delete|Abort)", a)}
    assert not [r for r in actions if r == "*"]


def test_image_builder_writes_images_only() -> None:
    actions = _policy_actions("image_builder")
    writers = {r for r, acts in actions.items() if "s3:PutObject" in acts}
    assert writers == {"${local.images}"}, "the builder may write under the images prefix only"
    assert "s3:GetObject" in actions["${local.repo}"]
    assert "kms:GenerateDataKey" in actions["${var.kms_key_arn}"]


def test_activator_reads_the_repository_only() -> None:
    actions = _policy_actions("activator")
    assert actions["${local.repo}"] == {"s3:GetObject"}
    assert "${local.images}" not in actions


def test_every_role_is_bound_by_pod_identity() -> None:
    mod = module("modules/identity")
    association = mod.resources()[("aws_eks_pod_identity_association", "thaw")]
    assert expression(association["for_each"]) == "local.role_suffix"
    trust = mod.resources("data")[("aws_iam_policy_document", "pod_identity_trust")]
    statement = trust["statement"][0]
    assert statement["principals"][0]["identifiers"] == ["pods.eks.amazonaws.com"]
    assert set(statement["actions"]) == {"sts:AssumeRole", "sts:TagSession"}


# --- cluster and GPU scheduling -----------------------------------------------------------------


def _eks_call() -> dict[str, Any]:
    return module("modules/cluster").module_calls["eks"]


def test_cluster_follows_eks_v21_conventions() -> None:
    eks = _eks_call()
    assert eks["source"] == "terraform-aws-modules/eks/aws"
    assert eks["version"] == "~> 21.0"
    # v20 spellings that v21 renamed: using one would be silently ignored or refused.
    renamed = {
        "cluster_name",
        "cluster_version",
        "cluster_endpoint_public_access",
        "cluster_endpoint_private_access",
        "cluster_addons",
        "cluster_enabled_log_types",
        "cluster_encryption_config",
    }
    assert not renamed & set(eks), f"v20 input names: {renamed & set(eks)}"
    assert expression(eks["addons"]) == "module.addons.addons"
    assert "eks-pod-identity-agent" in module("modules/cluster_addons").locals["addons"]
    karpenter = module("modules/cluster").module_calls["karpenter"]
    assert karpenter["source"] == "terraform-aws-modules/eks/aws//modules/karpenter"
    assert karpenter["version"] == "~> 21.0"
    # v21 names (the submodule's README): Pod Identity, not IRSA.
    assert karpenter["create_pod_identity_association"] is True
    assert not {"enable_irsa", "irsa_oidc_provider_arn", "enable_pod_identity"} & set(karpenter)


def test_cluster_api_is_private_by_default_and_logs_everything() -> None:
    mod = module("modules/cluster")
    eks = _eks_call()
    assert eks["endpoint_private_access"] is True
    assert mod.variables["endpoint_public_access"]["default"] is False
    assert set(mod.variables["enabled_log_types"]["default"]) == {
        "api",
        "audit",
        "authenticator",
        "controllerManager",
        "scheduler",
    }
    assert expression(eks["enabled_log_types"]) == "var.enabled_log_types"


def test_gpu_nodes_are_karpenters_with_gpu_nodes_labels_taints_and_storage() -> None:
    cluster = module("modules/cluster")
    groups = _eks_call()["eks_managed_node_groups"]
    assert set(groups) == {"system"}, "GPU nodes come from Karpenter, not a fixed node group"
    assert "taints" not in groups["system"], "the system group runs the activators untainted"
    pools = module("modules/node_pools")
    assert pools.module_calls["gpu_nodes"]["source"] == "../gpu_nodes"
    gpu_pool = pools.locals["node_pools"]["gpu"]["spec"]["template"]
    assert "module.gpu_nodes.node_labels" in expression(gpu_pool["metadata"]["labels"])
    assert expression(gpu_pool["spec"]["taints"]) == "module.gpu_nodes.node_taints"
    gpu_class = expression(pools.locals["node_classes"]["gpu"]["spec"])
    assert "module.gpu_nodes.user_data" in gpu_class
    assert "module.gpu_nodes.instance_store_policy" in gpu_class
    call = cluster.module_calls["node_pools"]
    assert expression(call["node_role_name"]) == "module.karpenter.node_iam_role_name"
    karpenter = cluster.resources()[("helm_release", "karpenter")]
    assert karpenter["chart"] == "karpenter" and karpenter["wait"] is True
    assert "local.system_labels" in expression(karpenter["values"][0]), (
        "Karpenter runs on the system group, never on a node it manages"
    )


def test_device_plugin_only_where_the_ami_needs_it_and_tolerates_the_taint() -> None:
    plugin = module("modules/cluster").resources()[("helm_release", "nvidia_device_plugin")]
    assert "module.node_pools.needs_nvidia_device_plugin" in expression(plugin["count"])
    values = expression(plugin["values"][0])
    assert "module.node_pools.gpu_pod_tolerations" in values
    assert "module.node_pools.gpu_pod_node_selector" in values
    assert plugin["wait"] is True


def test_chart_values_take_gpu_scheduling_from_gpu_nodes() -> None:
    mod = module("modules/chart_values")
    assert mod.module_calls["gpu_nodes"]["source"] == "../gpu_nodes"
    pools = mod.locals["pools"]
    assert "module.gpu_nodes.pod_tolerations" in expression(pools)
    assert "module.gpu_nodes.pod_node_selector" in expression(pools)
    hostpath = mod.locals["values"]["nodeCache"]["hostPath"]
    assert expression(hostpath) == "module.gpu_nodes.node_cache_host_path"


def test_gpu_taint_label_and_toleration_match_the_charts_documented_gpu_pool() -> None:
    nodes = module("modules/gpu_nodes").locals
    (taint,) = nodes["node_taints"]
    assert expression(taint["key"]) == "local.gpu_taint" and nodes["gpu_taint"] == "nvidia.com/gpu"
    assert taint["effect"] == "NoSchedule"
    assert nodes["gpu_label"] == "nvidia.com/gpu.present"
    # values.yaml's commented gpu class and docs/kubernetes.md use the same spelling.
    values_text = (TERRAFORM_ROOT.parents[1] / "deploy/helm/thaw/values.yaml").read_text()
    assert (
        "tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]" in values_text
    )
    assert 'nodeSelector: {nvidia.com/gpu.present: "true"}' in values_text


def test_gpu_ami_choice_is_the_two_nvidia_amis() -> None:
    rule = module("modules/gpu_nodes").variables["ami_type"]["validation"][0]["condition"]
    assert "AL2023_x86_64_NVIDIA" in rule and "BOTTLEROCKET_x86_64_NVIDIA" in rule


# --- platform and example -----------------------------------------------------------------------


def test_platform_forwards_chart_values_inputs_verbatim() -> None:
    platform = module("modules/platform")
    chart_values = module("modules/chart_values")
    call = platform.module_calls["chart_values"]
    for name, body in chart_values.variables.items():
        assert platform.variables.get(name) == body, (
            f"platform's variable {name} differs from chart_values' (keep the copies identical)"
        )
        assert expression(call.get(name)) == f"var.{name}", f"{name} is not forwarded"


def test_platform_installs_the_in_repo_chart_with_the_derived_values() -> None:
    platform = module("modules/platform")
    release = platform.resources()[("helm_release", "thaw")]
    assert expression(release["chart"]) == "local.chart_path"
    assert "deploy/helm/thaw" in expression(platform.locals["chart_path"])
    assert (platform.path / "../../../../").resolve() == TERRAFORM_ROOT.parents[1]
    assert "module.chart_values.values_yaml" in expression(release["values"])
    assert release["atomic"] is True


def test_contract_copy_is_versioned_with_the_platform_module() -> None:
    text = CONTRACT_PATH.read_text()
    assert "deploy/helm/thaw/values.yaml" in text
    values = contract_values()
    assert (values["image"]["registry"], values["image"]["repository"]) == (
        "ghcr.io",
        "thaw-serve/thaw",
    )
    assert values["imageGpu"]["repository"] == "thaw-serve/thaw-cuda"
    assert set(values["image"]) == set(values["imageGpu"]) == {
        "registry", "repository", "tag", "digest", "pullPolicy", "pullSecrets"
    }  # fmt: skip


def test_example_tfvars_set_declared_variables_and_all_required_ones() -> None:
    example = module("examples/complete")
    tfvars = hcl2.loads(
        (example.path / "terraform.tfvars.example").read_text(),
        serialization_options=hcl2.SerializationOptions(
            with_comments=False, strip_string_quotes=True, explicit_blocks=False
        ),
    )
    unknown = set(tfvars) - set(example.variables)
    assert not unknown, f"terraform.tfvars.example sets undeclared variables {unknown}"
    required = {n for n, b in example.variables.items() if "default" not in b}
    assert required <= set(tfvars), f"terraform.tfvars.example misses {required - set(tfvars)}"
    assert any(m.get("gpu", 0) > 0 for m in tfvars["models"])
    assert any(m.get("gpu", 0) == 0 for m in tfvars["models"])


def test_example_orders_the_platform_after_identity_and_the_cluster() -> None:
    call = module("examples/complete").module_calls["platform"]
    assert call["depends_on"] == ["${module.identity}", "${module.cluster}"]
    assert expression(call["namespace"]) == "module.identity.namespace"


# --- least privilege and small fixes ------------------------------------------------------------


def test_the_kms_alias_of_a_dotted_bucket_is_a_valid_alias() -> None:
    alias = module("modules/images_bucket").resources()[("aws_kms_alias", "images")]
    # Alias names allow [A-Za-z0-9/_-]; S3 names may hold dots.
    assert 'replace(var.bucket_name, ".", "-")' in str(alias["name"])
    assert "${var.bucket_name}" not in str(alias["name"])


def test_the_image_builder_lives_outside_the_activators_namespace() -> None:
    identity = module("modules/identity")
    sa_namespace = identity.locals["sa_namespace"]
    assert (
        expression(sa_namespace["activator"]) == expression(sa_namespace["runtime"]) == "local.ns"
    )
    assert "image_builder" in expression(sa_namespace["image_builder"])
    assert "local.ns" not in expression(sa_namespace["image_builder"])
    association = identity.resources()[("aws_eks_pod_identity_association", "thaw")]
    assert expression(association["namespace"]) == "local.sa_namespace[each.key]"
    builder = identity.resources()[("kubernetes_service_account_v1", "image_builder")]
    assert expression(builder["metadata"][0]["namespace"]) == "local.sa_namespace.image_builder"
    rule = identity.variables["image_builder_namespace"]["validation"][0]["condition"]
    assert "var.image_builder_namespace != var.namespace" in rule


def test_the_namespaces_carry_pod_security_labels() -> None:
    resources = module("modules/identity").resources()
    platform = resources[("kubernetes_namespace_v1", "thaw")]["metadata"][0]["labels"]
    # privileged because of the node cache's hostPath (docs/kubernetes.md, "Pod Security"); the
    # chart's admission policy enforces the rest of baseline.
    assert platform["pod-security.kubernetes.io/enforce"] == "privileged"
    assert platform["pod-security.kubernetes.io/warn"] == "baseline"
    assert platform["pod-security.kubernetes.io/audit"] == "baseline"
    builder = resources[("kubernetes_namespace_v1", "image_builder")]["metadata"][0]["labels"]
    assert builder["pod-security.kubernetes.io/enforce"] == "restricted"
    for labels in (platform, builder):
        assert expression(labels["pod-security.kubernetes.io/enforce-version"]) == (
            "local.pod_security_version"
        )


def test_versions_are_current() -> None:
    cluster = module("modules/cluster").variables
    minor = int(str(cluster["kubernetes_version"]["default"]).split(".")[1])
    assert minor >= 35, "EKS 1.33 and 1.34 leave standard support by 2026-12"
    plugin = tuple(
        int(x) for x in str(cluster["nvidia_device_plugin_chart_version"]["default"]).split(".")
    )
    assert plugin >= (0, 19, 0)
    karpenter = tuple(int(x) for x in str(cluster["karpenter_chart_version"]["default"]).split("."))
    assert karpenter >= (1, 14, 0)
