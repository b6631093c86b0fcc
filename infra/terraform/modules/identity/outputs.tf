output "namespace" {
  description = "Namespace Thaw runs in (after it exists, when created here): install the platform into it."
  value       = local.ns
}

output "service_accounts" {
  description = "Service account names per component: `activator`, `runtime`, `image_builder`."
  value       = local.sa
}

output "role_arns" {
  description = "IAM role ARN per component (`activator`, `runtime`, `image_builder`), bound to its service account by EKS Pod Identity."
  value       = { for k, r in aws_iam_role.thaw : k => r.arn }
}

output "pod_identity_association_ids" {
  description = "EKS Pod Identity association ID per component."
  value       = { for k, a in aws_eks_pod_identity_association.thaw : k => a.association_id }
}

output "activator_role_name" {
  description = "Name of the activator's Kubernetes Role (pods and leases in `namespace`), or null when not created here."
  value       = var.create_activator_rbac ? kubernetes_role_v1.activator[0].metadata[0].name : null
}

output "image_builder_namespace" {
  description = "Namespace of the image builder's service account (run image-building Jobs there)."
  value       = local.sa_namespace.image_builder
}
