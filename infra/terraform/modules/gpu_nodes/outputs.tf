output "ami_type" {
  description = "The GPU nodes' AMI type, as given."
  value       = var.ami_type
}

output "ami_alias" {
  description = "Karpenter EC2NodeClass `amiSelectorTerms` alias (`al2023@<version>` or `bottlerocket@<version>`)."
  value       = local.ami_alias
}

output "is_bottlerocket" {
  description = "True for the Bottlerocket NVIDIA AMI."
  value       = local.is_bottlerocket
}

output "node_labels" {
  description = "Kubernetes labels of every GPU node (`nvidia.com/gpu.present = \"true\"`)."
  value       = local.node_labels
}

output "node_taints" {
  description = "Taints of every GPU node, in Kubernetes spelling (`[{key, value, effect}]`, effect `NoSchedule`), as a Karpenter NodePool takes them."
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

output "instance_store_policy" {
  description = "EC2NodeClass `instanceStorePolicy`: `RAID0` on AL2023 (nodeadm's local-disk setup), null on Bottlerocket (its bootstrap command builds the array)."
  value       = local.is_bottlerocket ? null : "RAID0"
}

output "user_data" {
  description = "EC2NodeClass `userData`: on AL2023 a MIME multi-part document whose shell part installs thaw-node-cache.service; on Bottlerocket TOML settings whose bootstrap command builds the instance-store RAID0 and binds kubelet, containerd, pod logs and the cache path onto it."
  value       = local.is_bottlerocket ? local.bottlerocket_settings : local.al2023_user_data
}

output "node_cache_unit" {
  description = "AL2023: the systemd unit `thaw-node-cache.service` the user data installs (ordered after setup-local-disks.service, before kubelet.service); empty on Bottlerocket."
  value       = local.is_bottlerocket ? "" : local.node_cache_unit
}

output "node_cache_script" {
  description = "AL2023: the script thaw-node-cache.service runs (bind the cache onto the array, chown it to the runtime's user); empty on Bottlerocket."
  value       = local.is_bottlerocket ? "" : local.node_cache_script
}

output "user_data_script" {
  description = "AL2023: the shell part of `user_data` (cloud-init), which installs and enables the unit; empty on Bottlerocket."
  value       = local.is_bottlerocket ? "" : local.al2023_user_data_script
}
