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

output "system_node_selector" {
  description = "nodeSelector of the `system` managed node group (the activators run there)."
  value       = local.system_labels
}

output "cpu_instance_types" {
  description = "Instance types Karpenter's CPU NodePool may launch (for model instance-type checks)."
  value       = module.node_pools.cpu_instance_types
}

output "gpu_instance_types" {
  description = "Instance types Karpenter's GPU NodePool may launch (for model instance-type checks)."
  value       = module.node_pools.gpu_instance_types
}

output "gpu_ami_type" {
  description = "AMI type of the GPU nodes."
  value       = var.gpu_node_pool.ami_type
}

output "gpu_pod_node_selector" {
  description = "nodeSelector that puts a pod on a Karpenter GPU node (the GPU warm pools)."
  value       = module.node_pools.gpu_pod_node_selector
}

output "gpu_pod_tolerations" {
  description = "Tolerations of the GPU nodes' taint."
  value       = module.node_pools.gpu_pod_tolerations
}

output "cpu_pod_node_selector" {
  description = "nodeSelector that puts a pod on a Karpenter CPU node (the CPU warm pools)."
  value       = module.node_pools.cpu_pod_node_selector
}

output "karpenter_node_role_name" {
  description = "IAM role of the nodes Karpenter launches."
  value       = module.karpenter.node_iam_role_name
}

output "vpc_cni_configuration" {
  description = "vpc-cni's add-on configuration (enableNetworkPolicy: NetworkPolicies are enforced)."
  value       = module.addons.vpc_cni_configuration
}

output "node_cache_host_path" {
  description = "Host path of the node-local image cache on GPU nodes; give it to the platform module."
  value       = var.node_cache_host_path
}

output "nvidia_device_plugin_installed" {
  description = "True when this module installed NVIDIA's device plugin (AL2023 GPU AMI)."
  value       = length(helm_release.nvidia_device_plugin) > 0
}
