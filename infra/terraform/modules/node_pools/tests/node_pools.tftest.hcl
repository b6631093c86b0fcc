# Offline: no provider, so `command = plan` evaluates every output.

variables {
  name               = "thaw"
  node_role_name     = "thaw-karpenter-node"
  subnet_ids         = ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"]
  security_group_ids = ["sg-0123456789abcdef0"]
}

run "gpu_nodes_scale_to_zero_and_keep_the_gpu_taint" {
  command = plan

  variables {
    gpu = { instance_types = ["g6.xlarge", "g6e.xlarge"], max_gpus = 4, capacity_types = ["SPOT", "ON_DEMAND"] }
  }

  assert {
    condition = (
      output.node_pools.gpu.spec.disruption.consolidationPolicy == "WhenEmpty"
      && output.node_pools.cpu.spec.disruption.consolidationPolicy == "WhenEmpty"
      && output.node_pools.gpu.spec.disruption.consolidateAfter == "5m"
    )
    error_message = "empty nodes must be consolidated away (GPU nodes scale to zero)"
  }

  assert {
    condition     = output.node_pools.gpu.spec.limits["nvidia.com/gpu"] == "4"
    error_message = "the GPU pool is capped at max_gpus"
  }

  assert {
    condition = (
      output.node_pools.gpu.spec.template.spec.taints[0].key == "nvidia.com/gpu"
      && output.node_pools.gpu.spec.template.spec.taints[0].effect == "NoSchedule"
      && output.node_pools.gpu.spec.template.metadata.labels["nvidia.com/gpu.present"] == "true"
    )
    error_message = "GPU nodes carry the gpu_nodes taint and label"
  }

  assert {
    condition = alltrue([
      for k, v in output.gpu_pod_node_selector : output.node_pools.gpu.spec.template.metadata.labels[k] == v
    ])
    error_message = "the GPU pods' nodeSelector selects labels the GPU NodePool puts on its nodes"
  }

  assert {
    condition = alltrue([
      for k, v in output.cpu_pod_node_selector : lookup(output.node_pools.cpu.spec.template.metadata.labels, k, null) == v
      ]) && alltrue([
      for k, v in output.cpu_pod_node_selector : lookup(output.node_pools.gpu.spec.template.metadata.labels, k, null) != v
    ])
    error_message = "the CPU pods' nodeSelector selects CPU nodes and never GPU nodes"
  }

  assert {
    condition = anytrue([
      for r in output.node_pools.gpu.spec.template.spec.requirements :
      r.key == "karpenter.sh/capacity-type" && r.values == ["spot", "on-demand"]
    ])
    error_message = "capacity types are spelled as Karpenter does"
  }

  assert {
    condition = (
      output.node_classes.gpu.spec.instanceStorePolicy == "RAID0"
      && strcontains(output.node_classes.gpu.spec.userData, "thaw-node-cache.service")
      && output.node_classes.gpu.spec.amiSelectorTerms[0].alias == "al2023@latest"
      && output.node_classes.gpu.spec.metadataOptions.httpTokens == "required"
    )
    error_message = "AL2023 GPU nodes: nodeadm RAID0, the node cache unit, IMDSv2 only"
  }

  assert {
    condition     = [for m in output.manifests : m.kind] == ["EC2NodeClass", "EC2NodeClass", "NodePool", "NodePool"]
    error_message = "node classes are installed before the pools that name them"
  }

  assert {
    condition = alltrue([
      for p in values(output.node_pools) : contains([for c in output.manifests : c.metadata.name if c.kind == "EC2NodeClass"], p.spec.template.spec.nodeClassRef.name)
    ])
    error_message = "every NodePool names an EC2NodeClass of this module"
  }
}

run "bottlerocket_gpu_nodes_bind_the_cache_themselves" {
  command = plan

  variables {
    gpu = { ami_type = "BOTTLEROCKET_x86_64_NVIDIA" }
  }

  assert {
    condition = alltrue([
      !can(output.node_classes.gpu.spec.instanceStorePolicy),
      strcontains(output.node_classes.gpu.spec.userData, "ephemeral-storage"),
      output.node_classes.gpu.spec.amiSelectorTerms[0].alias == "bottlerocket@latest",
      output.node_classes.gpu.spec.blockDeviceMappings[0].deviceName == "/dev/xvdb",
      !output.needs_nvidia_device_plugin,
    ])
    error_message = "Bottlerocket: its own RAID0 bootstrap command, its data volume, its own device plugin"
  }
}

run "refuses_cpu_instance_types_in_the_gpu_pool" {
  command = plan

  variables {
    gpu = { instance_types = ["m6i.large"] }
  }

  expect_failures = [var.gpu]
}

run "refuses_a_bad_consolidation_delay" {
  command = plan

  variables {
    consolidate_after = "soon"
  }

  expect_failures = [var.consolidate_after]
}
