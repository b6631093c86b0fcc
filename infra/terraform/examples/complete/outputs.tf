output "cluster_name" {
  description = "EKS cluster name."
  value       = module.cluster.cluster_name
}

output "kubeconfig_command" {
  description = "Command that writes a kubeconfig entry for the cluster (run it from where the API endpoint is reachable)."
  value       = "aws eks update-kubeconfig --region ${var.region} --name ${module.cluster.cluster_name}"
}

output "namespace" {
  description = "Namespace the platform runs in."
  value       = module.platform.namespace
}

output "images_bucket" {
  description = "Name of the images bucket."
  value       = module.images_bucket.bucket_name
}

output "model_repository_uri" {
  description = "Where to upload the Triton model repository (`aws s3 sync ./model_repository <uri>`); the activator and runtime read it."
  value       = module.images_bucket.model_repository_uri
}

output "images_store_uri" {
  description = "Snapshot image store (`thaw snapshot push --store <uri>`); runtime replicas restore from it."
  value       = module.images_bucket.images_store_uri
}

output "role_arns" {
  description = "IAM role per component (activator, runtime, image_builder), bound to its service account by EKS Pod Identity."
  value       = module.identity.role_arns
}

output "image_builder_service_account" {
  description = "Service account to run image-building Jobs as (may write images)."
  value       = module.identity.service_accounts.image_builder
}

output "image_builder_namespace" {
  description = "Namespace of the image builder's service account (not the platform's: the activators cannot run pods as it)."
  value       = module.identity.image_builder_namespace
}

output "models" {
  description = "Map of model name to its endpoint: effective scaling settings, GPUs, scheduling, and the KServe v2 `infer_path` on the activator Service."
  value       = module.platform.models
}

output "nvidia_device_plugin_installed" {
  description = "Whether the NVIDIA device plugin was installed (AL2023 GPU AMI) or comes with the AMI (Bottlerocket)."
  value       = module.cluster.nvidia_device_plugin_installed
}
