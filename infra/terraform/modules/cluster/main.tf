# The EKS cluster (terraform-aws-modules/eks v21): private API endpoint by default, every
# control-plane log type on, secrets encrypted with a KMS key, EKS Pod Identity agent installed.
# Two managed node groups: CPU for the activator and system pods, GPU for runtime replicas, the
# latter tainted nvidia.com/gpu:NoSchedule, labelled nvidia.com/gpu.present=true, with its
# instance-store NVMe assembled into the node cache. The taint, label and boot configuration come
# from ../gpu_nodes, which the chart values read too.

module "gpu_nodes" {
  source = "../gpu_nodes"

  ami_type             = var.gpu_node_group.ami_type
  node_cache_host_path = var.node_cache_host_path
}

locals {
  cpu_labels = { "thaw.dev/node-pool" = "system" }
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

  addons = {
    coredns    = {}
    kube-proxy = {}
    vpc-cni    = { before_compute = true }
    # Hands the IAM roles of the identity module to pods; must run before pods start.
    eks-pod-identity-agent = { before_compute = true }
  }

  eks_managed_node_groups = {
    system = {
      ami_type       = "AL2023_x86_64_STANDARD"
      instance_types = var.cpu_node_group.instance_types
      min_size       = var.cpu_node_group.min_size
      max_size       = var.cpu_node_group.max_size
      desired_size   = var.cpu_node_group.desired_size
      labels         = local.cpu_labels
      block_device_mappings = {
        root = {
          device_name = "/dev/xvda"
          ebs         = merge(local.encrypted_gp3, { volume_size = var.cpu_node_group.disk_size_gib })
        }
      }
    }

    gpu = {
      ami_type       = module.gpu_nodes.ami_type
      instance_types = var.gpu_node_group.instance_types
      capacity_type  = var.gpu_node_group.capacity_type
      min_size       = var.gpu_node_group.min_size
      max_size       = var.gpu_node_group.max_size
      desired_size   = var.gpu_node_group.desired_size
      labels         = module.gpu_nodes.node_labels
      taints         = module.gpu_nodes.node_taints
      # Instance-store NVMe: RAID0 for kubelet/containerd plus the node cache bind mount.
      cloudinit_pre_nodeadm = module.gpu_nodes.cloudinit_pre_nodeadm
      bootstrap_extra_args  = module.gpu_nodes.bootstrap_extra_args
      block_device_mappings = {
        data = {
          device_name = module.gpu_nodes.data_volume_device_name
          ebs         = merge(local.encrypted_gp3, { volume_size = var.gpu_node_group.disk_size_gib })
        }
      }
    }
  }

  tags = var.tags
}

# AL2023's NVIDIA AMI has the driver and container toolkit but not the device plugin that
# advertises nvidia.com/gpu to the scheduler; Bottlerocket's NVIDIA variants run their own.
resource "helm_release" "nvidia_device_plugin" {
  count = module.gpu_nodes.needs_nvidia_device_plugin ? 1 : 0

  name       = "nvidia-device-plugin"
  repository = "https://nvidia.github.io/k8s-device-plugin"
  chart      = "nvidia-device-plugin"
  version    = var.nvidia_device_plugin_chart_version
  namespace  = "kube-system"

  values = [yamlencode({
    nodeSelector = module.gpu_nodes.pod_node_selector
    tolerations  = module.gpu_nodes.pod_tolerations
  })]

  atomic          = true
  cleanup_on_fail = true

  depends_on = [module.eks]
}
