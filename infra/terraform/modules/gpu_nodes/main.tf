# What a GPU node looks like to Kubernetes and how pods land on it: the node labels and taints
# (Karpenter's GPU NodePool puts them on every node it launches), the matching pod nodeSelector
# and tolerations, whether the AMI needs the NVIDIA device plugin, the Karpenter AMI alias, and
# the boot configuration that puts the node cache on instance-store NVMe. The node_pools module
# (NodePool, EC2NodeClass) and the chart_values module (runtime pods) both read these outputs,
# so the taint and its toleration cannot drift apart.

locals {
  gpu_label = "nvidia.com/gpu.present"
  gpu_taint = "nvidia.com/gpu"

  node_labels = { (local.gpu_label) = "true" }

  # Kubernetes spelling (Karpenter NodePool `spec.template.spec.taints`).
  node_taints = [{ key = local.gpu_taint, value = "true", effect = "NoSchedule" }]

  pod_node_selector = local.node_labels
  pod_tolerations = [
    for taint in local.node_taints : { key = taint.key, operator = "Exists", effect = taint.effect }
  ]

  is_bottlerocket = startswith(var.ami_type, "BOTTLEROCKET_")

  # Bottlerocket's NVIDIA variants run the device plugin as part of the OS; the AL2023 NVIDIA AMI
  # ships the driver and container toolkit only, so the plugin must be installed in the cluster.
  needs_nvidia_device_plugin = !local.is_bottlerocket

  # Karpenter picks the NVIDIA variant of the family for GPU instance types by itself.
  ami_alias = "${local.is_bottlerocket ? "bottlerocket" : "al2023"}@${var.ami_version}"

  # AL2023: the EC2NodeClass's `instanceStorePolicy: RAID0` makes Karpenter hand nodeadm a
  # NodeConfig with the RAID0 local-storage strategy; nodeadm writes it into
  # setup-local-disks.service, which stripes the instance-store disks, mounts the array at
  # <mountPath>/0 and moves kubelet, containerd and pod logs onto it, before kubelet starts.
  # thaw-node-cache.service then binds a directory of the array at the cache path (ordered after
  # setup-local-disks, before kubelet; tests/unit/infra check the order on the unit files).
  al2023_array_mount_point = "/mnt/k8s-disks/0"
  node_cache_script = templatefile("${path.module}/templates/thaw-node-cache.sh.tftpl", {
    array_mount_point = local.al2023_array_mount_point
    cache_path        = var.node_cache_host_path
    uid               = var.runtime_uid
    gid               = var.runtime_gid
  })
  node_cache_unit = file("${path.module}/templates/thaw-node-cache.service.tftpl")
  al2023_user_data_script = templatefile("${path.module}/templates/al2023-user-data.sh.tftpl", {
    script = local.node_cache_script
    unit   = local.node_cache_unit
  })
  # Karpenter merges its own NodeConfig part into a MIME multi-part user data on AL2023.
  al2023_user_data = join("\r\n", [
    "MIME-Version: 1.0",
    "Content-Type: multipart/mixed; boundary=\"THAW\"",
    "",
    "--THAW",
    "Content-Type: text/x-shellscript; charset=\"us-ascii\"",
    "",
    local.al2023_user_data_script,
    "--THAW--",
    "",
  ])

  # Bottlerocket: `ephemeral-storage init` builds the RAID0 and `bind` mounts directories of it
  # over the given paths (paths under /mnt/ are allowed), on every boot (`mode = "always"`),
  # before kubelet starts. Bottlerocket has no shell to chown with: the chart's runtime pods own
  # the directory through their init container (fsGroup).
  bottlerocket_storage_commands = [
    ["apiclient", "ephemeral-storage", "init"],
    ["apiclient", "ephemeral-storage", "bind", "--dirs",
    "/var/lib/containerd", "/var/lib/kubelet", "/var/log/pods", var.node_cache_host_path],
  ]
  bottlerocket_settings = <<-EOT
    [settings.bootstrap-commands.thaw-ephemeral-storage]
    commands = ${jsonencode(local.bottlerocket_storage_commands)}
    essential = true
    mode = "always"
  EOT
}
