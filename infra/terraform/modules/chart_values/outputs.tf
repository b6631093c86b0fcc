output "values" {
  description = "The chart values as an object (the shape of ../platform/CHART_VALUES.md)."
  value       = local.values
}

output "values_yaml" {
  description = "The chart values as YAML, ready for `helm_release.values`."
  value       = yamlencode(local.values)
}

output "endpoints" {
  description = "Map of model name to its effective endpoint (see the model_endpoints module's `endpoints`)."
  value       = module.model_endpoints.endpoints
}

output "thaw_parameters" {
  description = "Map of model name to the `thaw.*` parameters its chart entry stands for."
  value       = module.model_endpoints.thaw_parameters
}

output "gpu_pod_tolerations" {
  description = "Tolerations the runtime's GPU pods get (the GPU node taints, in Kubernetes spelling)."
  value       = module.gpu_nodes.pod_tolerations
}

output "gpu_pod_node_selector" {
  description = "nodeSelector the runtime's GPU pods get."
  value       = module.gpu_nodes.pod_node_selector
}
