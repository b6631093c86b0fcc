# What a GPU node looks like to Kubernetes and how pods land on it: the node group's labels and
# taints, the matching pod nodeSelector and tolerations, whether the AMI needs the NVIDIA device
# plugin, and the boot configuration that puts the node cache on instance-store NVMe. The cluster
# module (node group) and the chart_values module (runtime pods) both read these outputs, so the
# taint and its toleration cannot drift apart.

locals {
  gpu_label = "nvidia.com/gpu.present"
  gpu_taint = "nvidia.com/gpu"

  node_labels = { (local.gpu_label) = "true" }

  # EKS managed node group taints (terraform-aws-modules/eks v21 shape: a map of objects).
  node_taints = {
    gpu = { key = local.gpu_taint, value = "true", effect = "NO_SCHEDULE" }
  }

  # The EKS API spells taint effects in SCREAMING_CASE; pods tolerate them in Kubernetes' spelling.
  kubernetes_effect = {
    NO_SCHEDULE        = "NoSchedule"
    NO_EXECUTE         = "NoExecute"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
  }

  pod_node_selector = local.node_labels
  pod_tolerations = [
    for taint in values(local.node_taints) : {
      key      = taint.key
      operator = "Exists"
      effect   = local.kubernetes_effect[taint.effect]
    }
  ]

  is_bottlerocket = startswith(var.ami_type, "BOTTLEROCKET_")

  # Bottlerocket's NVIDIA variants run the device plugin as part of the OS; the AL2023 NVIDIA AMI
  # ships the driver and container toolkit only, so the plugin must be installed in the cluster.
  needs_nvidia_device_plugin = !local.is_bottlerocket

  # AL2023 keeps the OS and the data on one root volume; Bottlerocket has a small OS volume
  # (/dev/xvda) and a separate data volume (/dev/xvdb) where images and pod data live.
  data_volume_device_name = local.is_bottlerocket ? "/dev/xvdb" : "/dev/xvda"

  # nodeadm assembles the instance-store disks into one RAID0 array mounted at
  # <mountPath>/0 and moves kubelet, containerd and pod logs onto it (its `RAID0` strategy);
  # the script then bind-mounts a directory of that array at the cache path.
  al2023_array_mount_point = "/mnt/k8s-disks/0"
  al2023_node_config       = <<-EOT
    ---
    apiVersion: node.eks.aws/v1alpha1
    kind: NodeConfig
    spec:
      instance:
        localStorage:
          strategy: RAID0
  EOT
  al2023_cache_script = templatefile("${path.module}/templates/al2023-node-cache.sh.tftpl", {
    array_mount_point = local.al2023_array_mount_point
    cache_path        = var.node_cache_host_path
  })

  # Bottlerocket: `ephemeral-storage init` builds the RAID0 and `bind` mounts directories of it
  # over the given paths (paths under /mnt/ are allowed), on every boot (`mode = "always"`).
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
