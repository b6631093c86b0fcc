# Offline: the module has no provider, so `command = plan` evaluates every output.

run "al2023_taint_is_tolerated_and_device_plugin_needed" {
  command = plan

  assert {
    condition = alltrue([
      for taint in output.node_taints : anytrue([
        for toleration in output.pod_tolerations :
        toleration.key == taint.key && toleration.operator == "Exists" && toleration.effect == taint.effect
      ])
    ])
    error_message = "every GPU node taint must have a matching pod toleration"
  }

  assert {
    condition     = output.node_taints[0].key == "nvidia.com/gpu" && output.node_taints[0].effect == "NoSchedule"
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
    condition     = output.needs_nvidia_device_plugin && output.ami_alias == "al2023@latest"
    error_message = "the AL2023 NVIDIA AMI needs the device plugin installed and the al2023 alias"
  }

  assert {
    condition     = output.instance_store_policy == "RAID0"
    error_message = "AL2023 nodes get nodeadm's RAID0 local-disk setup through the EC2NodeClass"
  }
}

run "al2023_user_data_installs_the_unit_and_the_script" {
  command = plan

  variables {
    node_cache_host_path = "/mnt/models"
    runtime_uid          = 4242
  }

  assert {
    condition     = startswith(output.user_data, "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"THAW\"")
    error_message = "Karpenter merges its NodeConfig into a MIME multi-part user data"
  }

  assert {
    condition     = strcontains(output.user_data, output.user_data_script)
    error_message = "the user data carries the installer script"
  }

  assert {
    condition = (
      strcontains(output.user_data_script, output.node_cache_unit)
      && strcontains(output.user_data_script, output.node_cache_script)
    )
    error_message = "the installer writes the unit and the script verbatim"
  }

  assert {
    condition = (
      strcontains(output.node_cache_script, "cache=\"/mnt/models\"")
      && strcontains(output.node_cache_script, "chown \"4242:10001\"")
    )
    error_message = "the script binds the configured path and gives it to the runtime's user"
  }
}

run "bottlerocket_binds_the_cache_and_runs_its_own_device_plugin" {
  command = plan

  variables {
    ami_type             = "BOTTLEROCKET_x86_64_NVIDIA"
    node_cache_host_path = "/mnt/models-cache"
    ami_version          = "v1.50.0"
  }

  assert {
    condition     = !output.needs_nvidia_device_plugin && output.ami_alias == "bottlerocket@v1.50.0"
    error_message = "Bottlerocket NVIDIA variants run the device plugin themselves"
  }

  assert {
    condition     = output.node_cache_unit == "" && output.instance_store_policy == null
    error_message = "nodeadm parts must not be rendered for Bottlerocket"
  }

  assert {
    condition = (
      strcontains(output.user_data, "[settings.bootstrap-commands.thaw-ephemeral-storage]")
      && strcontains(output.user_data, "[\"apiclient\",\"ephemeral-storage\",\"init\"]")
      && strcontains(output.user_data, "\"/var/lib/kubelet\",\"/var/log/pods\",\"/mnt/models-cache\"]")
      && strcontains(output.user_data, "mode = \"always\"")
    )
    error_message = "Bottlerocket must init ephemeral storage and bind kubelet, pod logs and the cache path on every boot"
  }

  assert {
    condition     = output.node_taints[0].key == "nvidia.com/gpu" && output.pod_tolerations[0].key == "nvidia.com/gpu"
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
