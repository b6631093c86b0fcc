# The Thaw platform on the cluster: one helm_release of the in-repo chart (deploy/helm/thaw),
# its values derived from this module's variables by ../chart_values (shape: CHART_VALUES.md),
# one endpoint per model of `var.models`.

module "chart_values" {
  source = "../chart_values"

  image                   = var.image
  image_gpu               = var.image_gpu
  service_account         = var.service_account
  activator               = var.activator
  runtime                 = var.runtime
  node_class_selectors    = var.node_class_selectors
  model_repository        = var.model_repository
  images_store_uri        = var.images_store_uri
  images_region           = var.images_region
  node_cache              = var.node_cache
  gpu_ami_type            = var.gpu_ami_type
  models                  = var.models
  model_defaults          = var.model_defaults
  gpu_instance_types      = var.gpu_instance_types
  cpu_instance_types      = var.cpu_instance_types
  metrics_pod_annotations = var.metrics_pod_annotations
  network_policy_enabled  = var.network_policy_enabled
}

locals {
  # path.module is infra/terraform/modules/platform; the chart lives at the repository root.
  chart_path = coalesce(var.chart_path, "${path.module}/../../../../deploy/helm/thaw")
}

resource "helm_release" "thaw" {
  name      = var.release_name
  chart     = local.chart_path
  namespace = var.namespace
  # The identity module owns the namespace (its RBAC and Pod Identity associations live there).
  create_namespace = false

  values = concat([module.chart_values.values_yaml], var.extra_values)

  # A failed install or upgrade rolls back instead of leaving half a platform. `wait` covers the
  # activators and the warm pools that keep pods (CPU by default); the example orders this
  # release after the whole cluster module (Karpenter and its NodePools, the device plugin), so
  # the nodes those pods need can be launched from the first second (README: first apply).
  atomic          = true
  cleanup_on_fail = true
  wait            = true
  timeout         = var.timeout_s
  max_history     = 10
}
