output "manifests" {
  description = "The EC2NodeClasses, then the NodePools, as Kubernetes objects (install after the Karpenter chart)."
  value       = local.manifests
}

output "node_pools" {
  description = "Map of node class (`gpu`, `cpu`) to its NodePool object."
  value       = local.node_pools
}

output "node_classes" {
  description = "Map of node class (`gpu`, `cpu`) to its EC2NodeClass object."
  value       = local.node_classes
}

output "gpu_pod_node_selector" {
  description = "nodeSelector that puts a pod on this module's GPU nodes."
  value       = merge(module.gpu_nodes.pod_node_selector, { (local.class_label) = "gpu" })
}

output "gpu_pod_tolerations" {
  description = "Tolerations that let a pod onto this module's GPU nodes."
  value       = module.gpu_nodes.pod_tolerations
}

output "cpu_pod_node_selector" {
  description = "nodeSelector that puts a pod on this module's CPU nodes (the CPU warm pools)."
  value       = { (local.class_label) = "cpu" }
}

output "needs_nvidia_device_plugin" {
  description = "True when the GPU AMI needs the NVIDIA device plugin installed in the cluster (AL2023)."
  value       = module.gpu_nodes.needs_nvidia_device_plugin
}

output "gpu_instance_types" {
  description = "Instance types the GPU NodePool may launch (for model instance-type checks)."
  value       = var.gpu.instance_types
}

output "cpu_instance_types" {
  description = "Instance types the CPU NodePool may launch (for model instance-type checks)."
  value       = var.cpu.instance_types
}
