output "endpoints" {
  description = "Map of model name to its effective endpoint: scaling settings with defaults filled in, `gpu`, `instance_type`, `placement_class`, `hot`, its pods' `label_value`, and its pods' `node_selector` and `tolerations`."
  value = {
    for name, e in local.endpoints : name => merge(e, local.scheduling[name])
  }

  precondition {
    condition     = length(local.inverted_replicas) == 0
    error_message = "`models[*].min_replicas` must be <= `max_replicas`: ${jsonencode(local.inverted_replicas)}."
  }

  precondition {
    condition     = length(local.unplaceable_gpu) == 0
    error_message = "GPU models pinned to an instance type the GPU node group does not have (${jsonencode(var.gpu_instance_types)}): ${jsonencode(local.unplaceable_gpu)}."
  }

  precondition {
    condition     = length(local.unplaceable_cpu) == 0
    error_message = "CPU models pinned to an instance type the CPU node group does not have (${jsonencode(var.cpu_instance_types)}): ${jsonencode(local.unplaceable_cpu)}."
  }
}

output "chart_models" {
  description = "The chart's `models` list (contract keys: name, minReplicas, maxReplicas, targetConcurrency, containerConcurrency, scaleToZeroGraceSeconds, activationTimeoutSeconds, gpu, hot, placementClass), in `var.models` order."
  value       = local.chart_models
}

output "thaw_parameters" {
  description = "Map of model name to the config.pbtxt `thaw.*` parameters (string values) its chart entry stands for."
  value       = local.thaw_parameters
}

output "hot_models" {
  description = "Names of the models whose images are prefetched to every node cache."
  value       = [for m in var.models : m.name if m.hot]
}

output "max_gpus_per_replica" {
  description = "The most GPUs any one model asks per replica (0 when every model runs on CPU)."
  value       = max(0, [for m in var.models : m.gpu]...)
}

output "placement_classes" {
  description = "Map of placement class to what its pods need: `gpu` (GPUs per pod) and `instance_type` (\"\" = any of the node pool's). One warm pool per class; `default` (CPU, any type) is always there."
  value = merge(
    { default = { gpu = 0, instance_type = "" } },
    { for name, needs in local.classes : name => needs[0] },
  )
}
