output "cluster_name" {
  description = "Name of the EKS cluster (`aws eks update-kubeconfig --name`)."
  value       = module.eks.cluster_name
}

output "cluster_arn" {
  description = "ARN of the EKS cluster."
  value       = module.eks.cluster_arn
}

output "cluster_endpoint" {
  description = "Kubernetes API endpoint (private unless `endpoint_public_access`); the helm and kubernetes providers connect here."
  value       = module.eks.cluster_endpoint
}

output "cluster_certificate_authority_data" {
  description = "Base64 CA certificate of the API endpoint, for provider and kubeconfig setup."
  value       = module.eks.cluster_certificate_authority_data
}

output "cluster_version" {
  description = "Kubernetes version the control plane runs."
  value       = module.eks.cluster_version
}

output "oidc_provider_arn" {
  description = "ARN of the cluster's IAM OIDC provider, for components that still use IRSA."
  value       = module.eks.oidc_provider_arn
}

output "cloudwatch_log_group_name" {
  description = "CloudWatch log group receiving the control-plane logs."
  value       = module.eks.cloudwatch_log_group_name
}

output "node_security_group_id" {
  description = "Security group shared by the nodes."
  value       = module.eks.node_security_group_id
}

output "cpu_instance_types" {
  description = "Instance types of the CPU node group (for model instance-type checks)."
  value       = var.cpu_node_group.instance_types
}

output "gpu_instance_types" {
  description = "Instance types of the GPU node group (for model instance-type checks)."
  value       = var.gpu_node_group.instance_types
}

output "gpu_ami_type" {
  description = "AMI type of the GPU node group."
  value       = module.gpu_nodes.ami_type
}

output "gpu_node_labels" {
  description = "Labels on every GPU node."
  value       = module.gpu_nodes.node_labels
}

output "gpu_node_taints" {
  description = "Taints on every GPU node (EKS shape)."
  value       = module.gpu_nodes.node_taints
}

output "node_cache_host_path" {
  description = "Host path of the node-local image cache on GPU nodes; give it to the platform module."
  value       = module.gpu_nodes.node_cache_host_path
}

output "nvidia_device_plugin_installed" {
  description = "True when this module installed NVIDIA's device plugin (AL2023 GPU AMI)."
  value       = length(helm_release.nvidia_device_plugin) > 0
}
