output "release_name" {
  description = "Name of the Helm release (`helm -n <namespace> status <name>`)."
  value       = helm_release.thaw.name
}

output "namespace" {
  description = "Namespace the platform runs in."
  value       = helm_release.thaw.namespace
}

output "chart_version" {
  description = "Version of the installed chart."
  value       = helm_release.thaw.metadata.version
}

output "values_yaml" {
  description = "The values this module derived and gave the chart (before `extra_values`)."
  value       = module.chart_values.values_yaml
}

output "models" {
  description = "Map of model name to its endpoint: effective scaling settings, GPUs, instance type, hot flag, image URI, scheduling, and `infer_path`, the KServe v2 path to call on the activator Service."
  value = {
    for name, e in module.chart_values.endpoints : name => merge(e, {
      infer_path = "/v2/models/${name}/infer"
    })
  }
}

output "thaw_parameters" {
  description = "Map of model name to the `thaw.*` parameters its endpoint stands for."
  value       = module.chart_values.thaw_parameters
}
