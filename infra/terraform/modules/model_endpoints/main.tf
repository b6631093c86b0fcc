# One endpoint per model: `var.models` with defaults filled in, as the chart's `models` entries
# (camelCase, deploy/helm/thaw values contract), as the config.pbtxt `thaw.*` parameters the
# activator reads, and with each model's placement class: the warm pool its pods come from.
# A class is what a model's pods need of a node: `default` (CPU, any CPU node type), `cpu-<type>`
# (CPU, pinned), `gpu<N>` (N GPUs, any GPU type), `gpu<N>-<type>` (pinned, e.g. gpu1-g6e-xlarge);
# the chart renders one warm-pool Deployment per class and the activator makes a model's pods
# from its class's template only, so a CPU model never takes a GPU pod. Names are refused, not rewritten: a model's name is its URL, its Triton directory and its
# pods' `model` label value at once, so a mapped name would break one of the three.

locals {
  placement_class = {
    for m in var.models : m.name => join("-", compact([
      m.gpu > 0 ? "gpu${m.gpu}" : (m.instance_type == "" ? "default" : "cpu"),
      replace(m.instance_type, ".", "-"),
    ]))
  }

  # class -> what its pods need: GPUs per pod and the pinned instance type ("" = any).
  classes = {
    for m in var.models : local.placement_class[m.name] => { gpu = m.gpu, instance_type = m.instance_type }...
  }

  endpoints = {
    for m in var.models : m.name => {
      name                  = m.name
      label_value           = m.name
      gpu                   = m.gpu
      instance_type         = m.instance_type
      placement_class       = local.placement_class[m.name]
      hot                   = m.hot
      min_replicas          = coalesce(m.min_replicas, var.defaults.min_replicas)
      max_replicas          = coalesce(m.max_replicas, var.defaults.max_replicas)
      target_concurrency    = coalesce(m.target_concurrency, var.defaults.target_concurrency)
      container_concurrency = coalesce(m.container_concurrency, var.defaults.container_concurrency)
      scale_to_zero_grace_s = coalesce(m.scale_to_zero_grace_s, var.defaults.scale_to_zero_grace_s)
      activation_timeout_s  = coalesce(m.activation_timeout_s, var.defaults.activation_timeout_s)
    }
  }

  # Keys are the chart contract's `models[*]` keys; see modules/platform/CHART_VALUES.md.
  chart_models = [
    for m in var.models : {
      name                     = m.name
      minReplicas              = local.endpoints[m.name].min_replicas
      maxReplicas              = local.endpoints[m.name].max_replicas
      targetConcurrency        = local.endpoints[m.name].target_concurrency
      containerConcurrency     = local.endpoints[m.name].container_concurrency
      scaleToZeroGraceSeconds  = local.endpoints[m.name].scale_to_zero_grace_s
      activationTimeoutSeconds = local.endpoints[m.name].activation_timeout_s
      gpu                      = m.gpu
      hot                      = m.hot
      placementClass           = local.placement_class[m.name]
    }
  ]

  # What the chart's ConfigMap hands the activator: config.pbtxt `parameters` are strings.
  thaw_parameters = {
    for name, e in local.endpoints : name => tomap({
      "thaw.min_replicas"          = tostring(e.min_replicas)
      "thaw.max_replicas"          = tostring(e.max_replicas)
      "thaw.target_concurrency"    = tostring(e.target_concurrency)
      "thaw.container_concurrency" = tostring(e.container_concurrency)
      "thaw.scale_to_zero_grace_s" = tostring(e.scale_to_zero_grace_s)
      "thaw.activation_timeout_s"  = tostring(e.activation_timeout_s)
      "thaw.placement_class"       = e.placement_class
    })
  }

  scheduling = {
    for name, e in local.endpoints : name => {
      node_selector = merge(
        e.gpu > 0 ? var.gpu_node_selector : {},
        e.instance_type != "" ? { "node.kubernetes.io/instance-type" = e.instance_type } : {},
      )
      tolerations = e.gpu > 0 ? var.gpu_tolerations : []
    }
  }

  # Cross-field rules, checked by the output preconditions below.
  inverted_replicas = [for name, e in local.endpoints : name if e.min_replicas > e.max_replicas]
  unplaceable_gpu = [
    for name, e in local.endpoints : "${name} (${e.instance_type})"
    if e.gpu > 0 && e.instance_type != "" && length(var.gpu_instance_types) > 0 && !contains(var.gpu_instance_types, e.instance_type)
  ]
  unplaceable_cpu = [
    for name, e in local.endpoints : "${name} (${e.instance_type})"
    if e.gpu == 0 && e.instance_type != "" && length(var.cpu_instance_types) > 0 && !contains(var.cpu_instance_types, e.instance_type)
  ]
}
