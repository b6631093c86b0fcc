# Offline: the module has no provider, so `command = plan` evaluates every output.

run "al2023_taint_is_tolerated_and_device_plugin_needed" {
  command = plan

  assert {
    condition = alltrue([
      for taint in values(output.node_taints) : anytrue([
        for toleration in output.pod_tolerations :
        toleration.key == taint.key && toleration.operator == "Exists" && toleration.effect == "NoSchedule"
        if taint.effect == "NO_SCHEDULE"
      ])
    ])
    error_message = "every GPU node taint must have a matching pod toleration"
  }

  assert {
    condition     = output.node_taints.gpu.key == "nvidia.com/gpu" && output.node_taints.gpu.effect == "NO_SCHEDULE"
    error_message = "GPU nodes must carry the nvidia.com/gpu:NoSchedule taint"
  }

  assert {
    condition     = output.node_labels["nvidia.com/gpu.present"] == "true"
    error_message = "GPU nodes must be labelled nvidia.com/gpu.present=true"
  }

  assert {
    condition = alltrue([
      for key, value in output.pod_node_selector : lookup(output.node_labels, key, null) == value
    ])
    error_message = "the pod nodeSelector must select only labels the GPU nodes carry"
  }

  assert {
    condition     = output.needs_nvidia_device_plugin
    error_message = "the AL2023 NVIDIA AMI needs the device plugin installed"
  }

  assert {
    condition     = output.data_volume_device_name == "/dev/xvda"
    error_message = "AL2023 keeps images and pod data on /dev/xvda"
  }

  assert {
    condition     = output.bootstrap_extra_args == ""
    error_message = "Bottlerocket settings must not be rendered for AL2023"
  }
}

run "al2023_puts_the_cache_on_the_raid0_array" {
  command = plan

  assert {
    condition     = length(output.cloudinit_pre_nodeadm) == 2
    error_message = "AL2023 gets a NodeConfig part and a cache script part"
  }

  assert {
    condition = (
      output.cloudinit_pre_nodeadm[0].content_type == "application/node.eks.aws"
      && strcontains(output.cloudinit_pre_nodeadm[0].content, "strategy: RAID0")
    )
    error_message = "the first part must be a nodeadm NodeConfig with the RAID0 local-storage strategy"
  }

  assert {
    condition = (
      startswith(output.cloudinit_pre_nodeadm[1].content_type, "text/x-shellscript")
      && strcontains(output.cloudinit_pre_nodeadm[1].content, "cache=\"/mnt/thaw-cache\"")
      && strcontains(output.cloudinit_pre_nodeadm[1].content, "array=\"/mnt/k8s-disks/0\"")
      && strcontains(output.cloudinit_pre_nodeadm[1].content, "Options=bind")
    )
    error_message = "the script must bind /mnt/thaw-cache onto the nodeadm array at /mnt/k8s-disks/0"
  }
}

run "bottlerocket_binds_the_cache_and_runs_its_own_device_plugin" {
  command = plan

  variables {
    ami_type             = "BOTTLEROCKET_x86_64_NVIDIA"
    node_cache_host_path = "/mnt/models-cache"
  }

  assert {
    condition     = !output.needs_nvidia_device_plugin
    error_message = "Bottlerocket NVIDIA variants run the device plugin themselves"
  }

  assert {
    condition     = length(output.cloudinit_pre_nodeadm) == 0
    error_message = "nodeadm parts must not be rendered for Bottlerocket"
  }

  assert {
    condition = (
      strcontains(output.bootstrap_extra_args, "[settings.bootstrap-commands.thaw-ephemeral-storage]")
      && strcontains(output.bootstrap_extra_args, "[\"apiclient\",\"ephemeral-storage\",\"init\"]")
      && strcontains(output.bootstrap_extra_args, "\"/var/lib/kubelet\",\"/var/log/pods\",\"/mnt/models-cache\"]")
      && strcontains(output.bootstrap_extra_args, "mode = \"always\"")
    )
    error_message = "Bottlerocket must init ephemeral storage and bind kubelet, pod logs and the cache path on every boot"
  }

  assert {
    condition     = output.data_volume_device_name == "/dev/xvdb"
    error_message = "Bottlerocket keeps images and pod data on its data volume /dev/xvdb"
  }

  assert {
    condition     = output.node_taints.gpu.key == "nvidia.com/gpu" && output.pod_tolerations[0].key == "nvidia.com/gpu"
    error_message = "the taint and its toleration do not depend on the AMI"
  }
}

run "refuses_an_ami_without_nvidia_drivers" {
  command = plan

  variables {
    ami_type = "AL2023_x86_64_STANDARD"
  }

  expect_failures = [var.ami_type]
}

run "refuses_a_cache_path_outside_mnt" {
  command = plan

  variables {
    node_cache_host_path = "/var/cache/thaw"
  }

  expect_failures = [var.node_cache_host_path]
}

run "refuses_a_cache_path_that_climbs_out" {
  command = plan

  variables {
    node_cache_host_path = "/mnt/../etc"
  }

  expect_failures = [var.node_cache_host_path]
}

run "refuses_the_amis_own_mount_points" {
  command = plan

  variables {
    node_cache_host_path = "/mnt/k8s-disks/0/cache"
  }

  expect_failures = [var.node_cache_host_path]
}
