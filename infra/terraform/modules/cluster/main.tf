# The EKS cluster (terraform-aws-modules/eks v21): private API endpoint by default, every
# control-plane log type on, secrets encrypted with a KMS key, EKS Pod Identity agent installed,
# vpc-cni enforcing NetworkPolicies. One managed node group, `system`, of a fixed size for the
# activators, Karpenter and the cluster's own pods; every other node is Karpenter's (the karpenter
# submodule's IAM and interruption queue, the Karpenter chart, then ../node_pools' NodePools):
# GPU nodes (tainted nvidia.com/gpu:NoSchedule, labelled nvidia.com/gpu.present=true, node cache on
# instance-store NVMe) and CPU nodes for the CPU warm pools, each launched when a pod needs one and
# removed when empty, so GPU nodes scale to zero with the models.
#
# Order of a first apply (infra/terraform/README.md): control plane -> vpc-cni and Pod Identity
# agent -> system node group -> remaining add-ons -> Karpenter's IAM and queue -> Karpenter chart
# (waits for its pods) -> NodePools/EC2NodeClasses and, on AL2023, the NVIDIA device plugin. The
# platform module depends on this whole module.

module "addons" {
  source = "../cluster_addons"

  network_policy = var.network_policy
}

locals {
  system_labels = { "thaw.dev/node-pool" = "system" }
  encrypted_gp3 = {
    volume_type           = "gp3"
    encrypted             = true
    delete_on_termination = true
  }
}

module "eks" {
  # checkov:skip=CKV_TF_1:A registry module pinned to its v21 major release; registry versions are immutable, and a git commit source would bypass the registry.
  source  = "terraform-aws-modules/eks/aws"
  version = "~> 21.0"

  name               = var.name
  kubernetes_version = var.kubernetes_version

  vpc_id     = var.vpc_id
  subnet_ids = var.subnet_ids

  endpoint_private_access      = true
  endpoint_public_access       = var.endpoint_public_access
  endpoint_public_access_cidrs = var.endpoint_public_access_cidrs

  enabled_log_types                      = var.enabled_log_types
  create_cloudwatch_log_group            = true
  cloudwatch_log_group_retention_in_days = var.log_retention_days

  # Secrets envelope-encrypted with a KMS key the module creates and rotates.
  create_kms_key          = true
  enable_kms_key_rotation = true
  encryption_config       = { resources = ["secrets"] }

  authentication_mode                      = "API"
  enable_cluster_creator_admin_permissions = var.enable_cluster_creator_admin_permissions
  access_entries                           = var.access_entries

  # vpc-cni with its network-policy agent on (../cluster_addons): NetworkPolicies are enforced.
  addons = module.addons.addons

  eks_managed_node_groups = {
    system = {
      ami_type       = "AL2023_x86_64_STANDARD"
      instance_types = var.cpu_node_group.instance_types
      min_size       = var.cpu_node_group.min_size
      max_size       = var.cpu_node_group.max_size
      desired_size   = var.cpu_node_group.desired_size
      labels         = local.system_labels
      block_device_mappings = {
        root = {
          device_name = "/dev/xvda"
          ebs         = merge(local.encrypted_gp3, { volume_size = var.cpu_node_group.disk_size_gib })
        }
      }
    }
  }

  tags = var.tags
}


# ---------------------------------------------------------------------------------------------
# Karpenter: node IAM role, controller role (Pod Identity), interruption queue; its chart; pools
# ---------------------------------------------------------------------------------------------

module "karpenter" {
  # checkov:skip=CKV_TF_1:A registry module pinned to its v21 major release; registry versions are immutable, and a git commit source would bypass the registry.
  source  = "terraform-aws-modules/eks/aws//modules/karpenter"
  version = "~> 21.0"

  cluster_name = module.eks.cluster_name

  # The controller gets its role through EKS Pod Identity (kube-system/karpenter).
  create_pod_identity_association = true
  namespace                       = "kube-system"
  service_account                 = "karpenter"

  node_iam_role_use_name_prefix = false
  node_iam_role_name            = "${var.name}-karpenter-node"
  node_iam_role_additional_policies = {
    # Session Manager instead of SSH keys on the nodes.
    AmazonSSMManagedInstanceCore = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
  }

  tags = var.tags
}

resource "helm_release" "karpenter" {
  name       = "karpenter"
  repository = var.karpenter_chart_repository
  chart      = "karpenter"
  version    = var.karpenter_chart_version
  namespace  = "kube-system"

  values = [yamlencode({
    settings = {
      clusterName       = module.eks.cluster_name
      clusterEndpoint   = module.eks.cluster_endpoint
      interruptionQueue = module.karpenter.queue_name
    }
    serviceAccount = { name = module.karpenter.service_account }
    # Never on a node it manages: it would consolidate itself away.
    nodeSelector = local.system_labels
    controller = {
      resources = {
        requests = { cpu = "250m", memory = "512Mi" }
        limits   = { memory = "1Gi" }
      }
    }
  })]

  # Waits for the controller and its webhook: the NodePools below need the CRDs served.
  wait            = true
  timeout         = 600
  atomic          = true
  cleanup_on_fail = true

  depends_on = [module.eks, module.karpenter]
}

module "node_pools" {
  source = "../node_pools"

  name                 = lower(var.name)
  node_role_name       = module.karpenter.node_iam_role_name
  subnet_ids           = var.subnet_ids
  security_group_ids   = [module.eks.node_security_group_id]
  gpu                  = var.gpu_node_pool
  cpu                  = var.cpu_node_pool
  consolidate_after    = var.consolidate_after
  node_cache_host_path = var.node_cache_host_path
  tags                 = var.tags
}

# NodePools and EC2NodeClasses are custom resources: a Helm release of ./charts/manifests applies
# them after the Karpenter release has installed the CRDs (a kubernetes_manifest would need the
# CRDs at plan time, which a first apply does not have).
resource "helm_release" "node_pools" {
  name      = "thaw-node-pools"
  chart     = "${path.module}/charts/manifests"
  namespace = "kube-system"

  values = [yamlencode({ manifests = module.node_pools.manifests })]

  wait            = true
  timeout         = 300
  atomic          = true
  cleanup_on_fail = true

  depends_on = [helm_release.karpenter]
}

# AL2023's NVIDIA AMI has the driver and container toolkit but not the device plugin that
# advertises nvidia.com/gpu to the scheduler; Bottlerocket's NVIDIA variants run their own. A GPU
# node Karpenter launches runs it within seconds of joining (a DaemonSet on the GPU label), so a
# GPU pod binds as soon as the node advertises its GPUs.
resource "helm_release" "nvidia_device_plugin" {
  count = module.node_pools.needs_nvidia_device_plugin ? 1 : 0

  name       = "nvidia-device-plugin"
  repository = var.nvidia_device_plugin_chart_repository
  chart      = "nvidia-device-plugin"
  version    = var.nvidia_device_plugin_chart_version
  namespace  = "kube-system"

  values = [yamlencode(merge({
    nodeSelector = module.node_pools.gpu_pod_node_selector
    tolerations  = module.node_pools.gpu_pod_tolerations
    }, var.nvidia_device_plugin_image_repository == null ? {} : {
    # A mirror (no NAT): the chart's image from your registry, at the chart's own tag.
    image = { repository = var.nvidia_device_plugin_image_repository }
  }))]

  wait            = true
  timeout         = 300
  atomic          = true
  cleanup_on_fail = true

  depends_on = [module.eks]
}
