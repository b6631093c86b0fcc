# Nodes that scale to zero: Karpenter's NodePools and EC2NodeClasses for Thaw's two kinds of node,
# as plain Kubernetes objects (the cluster module installs them with a Helm release after the
# Karpenter chart, which brings their CRDs). GPU nodes carry the gpu_nodes labels and taint, and
# the node cache on instance-store NVMe; CPU nodes take the CPU warm pools. Both are consolidated
# when empty, so a node whose last runtime pod went away is gone `consolidate_after` later: with no
# warm GPU pod configured (the chart's per-class `replicas`), an idle GPU class costs nothing.

module "gpu_nodes" {
  source = "../gpu_nodes"

  ami_type             = var.gpu.ami_type
  ami_version          = var.gpu.ami_version
  node_cache_host_path = var.node_cache_host_path
  runtime_uid          = var.runtime_uid
  runtime_gid          = var.runtime_gid
}

locals {
  class_label = "thaw.dev/node-class"

  subnet_terms         = [for id in var.subnet_ids : { id = id }]
  security_group_terms = [for id in var.security_group_ids : { id = id }]

  # IMDSv2 only, one hop: pods cannot reach the node's instance role through IMDS.
  metadata_options = {
    httpEndpoint            = "enabled"
    httpProtocolIPv6        = "disabled"
    httpPutResponseHopLimit = 1
    httpTokens              = "required"
  }

  gpu_root_device = module.gpu_nodes.is_bottlerocket ? "/dev/xvdb" : "/dev/xvda"

  node_classes = {
    gpu = {
      apiVersion = "karpenter.k8s.aws/v1"
      kind       = "EC2NodeClass"
      metadata   = { name = "${var.name}-gpu" }
      spec = merge({
        role                       = var.node_role_name
        amiSelectorTerms           = [{ alias = module.gpu_nodes.ami_alias }]
        subnetSelectorTerms        = local.subnet_terms
        securityGroupSelectorTerms = local.security_group_terms
        metadataOptions            = local.metadata_options
        userData                   = module.gpu_nodes.user_data
        tags                       = var.tags
        blockDeviceMappings = [{
          deviceName = local.gpu_root_device
          ebs = {
            volumeSize          = "${var.gpu.disk_size_gib}Gi"
            volumeType          = "gp3"
            encrypted           = true
            deleteOnTermination = true
          }
        }]
        }, module.gpu_nodes.instance_store_policy == null ? {} : {
        instanceStorePolicy = module.gpu_nodes.instance_store_policy
      })
    }
    cpu = {
      apiVersion = "karpenter.k8s.aws/v1"
      kind       = "EC2NodeClass"
      metadata   = { name = "${var.name}-cpu" }
      spec = {
        role                       = var.node_role_name
        amiSelectorTerms           = [{ alias = "al2023@${var.cpu.ami_version}" }]
        subnetSelectorTerms        = local.subnet_terms
        securityGroupSelectorTerms = local.security_group_terms
        metadataOptions            = local.metadata_options
        tags                       = var.tags
        blockDeviceMappings = [{
          deviceName = "/dev/xvda"
          ebs = {
            volumeSize          = "${var.cpu.disk_size_gib}Gi"
            volumeType          = "gp3"
            encrypted           = true
            deleteOnTermination = true
          }
        }]
      }
    }
  }

  capacity_types = {
    gpu = [for c in var.gpu.capacity_types : c == "SPOT" ? "spot" : "on-demand"]
    cpu = [for c in var.cpu.capacity_types : c == "SPOT" ? "spot" : "on-demand"]
  }

  node_pools = {
    gpu = {
      apiVersion = "karpenter.sh/v1"
      kind       = "NodePool"
      metadata   = { name = "${var.name}-gpu" }
      spec = {
        template = {
          metadata = { labels = merge(module.gpu_nodes.node_labels, { (local.class_label) = "gpu" }) }
          spec = {
            nodeClassRef = { group = "karpenter.k8s.aws", kind = "EC2NodeClass", name = "${var.name}-gpu" }
            taints       = module.gpu_nodes.node_taints
            expireAfter  = var.expire_after
            requirements = [
              { key = "node.kubernetes.io/instance-type", operator = "In", values = var.gpu.instance_types },
              { key = "karpenter.sh/capacity-type", operator = "In", values = local.capacity_types.gpu },
              { key = "kubernetes.io/arch", operator = "In", values = ["amd64"] },
            ]
          }
        }
        # The most GPUs this pool may hold at once: a ceiling on the bill.
        limits = { "nvidia.com/gpu" = tostring(var.gpu.max_gpus) }
        disruption = {
          consolidationPolicy = "WhenEmpty"
          consolidateAfter    = var.consolidate_after
        }
      }
    }
    cpu = {
      apiVersion = "karpenter.sh/v1"
      kind       = "NodePool"
      metadata   = { name = "${var.name}-cpu" }
      spec = {
        template = {
          metadata = { labels = { (local.class_label) = "cpu" } }
          spec = {
            nodeClassRef = { group = "karpenter.k8s.aws", kind = "EC2NodeClass", name = "${var.name}-cpu" }
            expireAfter  = var.expire_after
            requirements = [
              { key = "node.kubernetes.io/instance-type", operator = "In", values = var.cpu.instance_types },
              { key = "karpenter.sh/capacity-type", operator = "In", values = local.capacity_types.cpu },
              { key = "kubernetes.io/arch", operator = "In", values = ["amd64"] },
            ]
          }
        }
        limits = { cpu = tostring(var.cpu.max_vcpus) }
        disruption = {
          consolidationPolicy = "WhenEmpty"
          consolidateAfter    = var.consolidate_after
        }
      }
    }
  }

  # EC2NodeClasses first: a NodePool names its class.
  manifests = concat(values(local.node_classes), values(local.node_pools))
}
