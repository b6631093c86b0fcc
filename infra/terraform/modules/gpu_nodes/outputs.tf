output "ami_type" {
  description = "The GPU node group's AMI type, as given."
  value       = var.ami_type
}

output "node_labels" {
  description = "Kubernetes labels of every GPU node (`nvidia.com/gpu.present = \"true\"`)."
  value       = local.node_labels
}

output "node_taints" {
  description = "Taints of the GPU node group, in the EKS managed node group shape (map of `{key, value, effect}` with EKS effect names such as `NO_SCHEDULE`)."
  value       = local.node_taints
}

output "pod_node_selector" {
  description = "nodeSelector that puts a pod on a GPU node."
  value       = local.pod_node_selector
}

output "pod_tolerations" {
  description = "Tolerations (Kubernetes spelling) that let a pod onto a GPU node: one per node taint."
  value       = local.pod_tolerations
}

output "needs_nvidia_device_plugin" {
  description = "True when the AMI does not run the NVIDIA device plugin itself (AL2023), so the cluster must install it."
  value       = local.needs_nvidia_device_plugin
}

output "node_cache_host_path" {
  description = "Host path of the node-local image cache on GPU nodes (instance-store NVMe when the instance type has it)."
  value       = var.node_cache_host_path
}

output "data_volume_device_name" {
  description = "Block device that holds container images and pod data for this AMI: `/dev/xvda` on AL2023, `/dev/xvdb` on Bottlerocket."
  value       = local.data_volume_device_name
}

output "cloudinit_pre_nodeadm" {
  description = "AL2023 only (empty on Bottlerocket): cloud-init parts for the node group's `cloudinit_pre_nodeadm`: a nodeadm NodeConfig with the `RAID0` local-storage strategy, and a script that bind-mounts the cache path onto the array."
  value = local.is_bottlerocket ? [] : [
    { content_type = "application/node.eks.aws", content = local.al2023_node_config },
    { content_type = "text/x-shellscript; charset=\"us-ascii\"", content = local.al2023_cache_script },
  ]
}

output "bootstrap_extra_args" {
  description = "Bottlerocket only (empty on AL2023): TOML settings for the node group's `bootstrap_extra_args` that build the instance-store RAID0 and bind kubelet, containerd, pod logs and the cache path onto it."
  value       = local.is_bottlerocket ? local.bottlerocket_settings : ""
}
