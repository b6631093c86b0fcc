output "addons" {
  description = "The `addons` map for terraform-aws-modules/eks v21 (coredns, kube-proxy, vpc-cni with its configuration, eks-pod-identity-agent)."
  value       = local.addons
}

output "vpc_cni_configuration" {
  description = "vpc-cni's configuration values, decoded (what `addons[\"vpc-cni\"].configuration_values` holds as JSON)."
  value       = local.vpc_cni_configuration
}
