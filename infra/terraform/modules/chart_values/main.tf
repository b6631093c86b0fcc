# The Helm chart's values (deploy/helm/thaw), built from typed inputs. The shape is fixed by
# ../platform/CHART_VALUES.md; tests/unit/infra checks the rendered keys and types against it.
# GPU scheduling comes from gpu_nodes, the same module the cluster's GPU node group reads, and the
# per-model entries from model_endpoints.

module "gpu_nodes" {
  source = "../gpu_nodes"

  ami_type             = var.gpu_ami_type
  node_cache_host_path = var.node_cache.host_path
}

module "model_endpoints" {
  source = "../model_endpoints"

  models             = var.models
  defaults           = var.model_defaults
  gpu_node_selector  = module.gpu_nodes.pod_node_selector
  gpu_tolerations    = module.gpu_nodes.pod_tolerations
  gpu_instance_types = var.gpu_instance_types
  cpu_instance_types = var.cpu_instance_types
}

locals {
  classes = module.model_endpoints.placement_classes

  # One warm pool per placement class. `replicas` is the class's count of IDLE warm pods: on a
  # GPU class each is a GPU node's hour per hour, so GPU classes default to 0 (scale to zero; a
  # cold start then waits for a node) unless `runtime.gpu_pool_replicas` or
  # `runtime.class_pool_replicas` say otherwise.
  pools = {
    for class, need in local.classes : class => {
      replicas = lookup(var.runtime.class_pool_replicas, class, need.gpu > 0 ? var.runtime.gpu_pool_replicas : var.runtime.pool_replicas)
      gpu      = need.gpu
      nodeSelector = merge(
        need.gpu > 0 ? merge(module.gpu_nodes.pod_node_selector, var.node_class_selectors.gpu) : merge(var.node_class_selectors.cpu, var.runtime.node_selector),
        need.instance_type != "" ? { "node.kubernetes.io/instance-type" = need.instance_type } : {},
      )
      tolerations = need.gpu > 0 ? module.gpu_nodes.pod_tolerations : var.runtime.tolerations
      resources   = need.gpu > 0 ? var.runtime.gpu_resources : var.runtime.resources
    }
  }

  image_values = {
    for key, img in { image = var.image, imageGpu = var.image_gpu } : key => {
      registry              = img.registry
      repository            = img.repository
      tag                   = img.tag
      digest                = img.digest
      pullPolicy            = img.pull_policy
      pullSecrets           = img.pull_secrets
    }
  }

  values = {
    image    = local.image_values.image
    imageGpu = local.image_values.imageGpu
    serviceAccount = {
      create      = true
      name        = var.service_account.name
      annotations = var.service_account.annotations
    }
    activator = {
      replicas             = var.activator.replicas
      resources            = var.activator.resources
      nodeSelector         = var.activator.node_selector
      tolerations          = var.activator.tolerations
      leaseDurationSeconds = var.activator.lease_duration_seconds
      extraArgs            = var.activator.extra_args
    }
    runtime = {
      serviceAccountName = var.service_account.runtime_name
      pools              = local.pools
      arenaBytes         = var.runtime.arena_bytes
      preloadFrameworks  = var.runtime.preload_frameworks
    }
    modelRepository = {
      source        = var.model_repository.source
      configMapName = var.model_repository.config_map_name
      pvcName       = var.model_repository.pvc_name
      s3Uri         = var.model_repository.s3_uri
    }
    images = {
      storeUri = var.images_store_uri
      region   = var.images_region
    }
    nodeCache = {
      hostPath = module.gpu_nodes.node_cache_host_path
      maxBytes = var.node_cache.max_bytes
      prefetch = { enabled = var.node_cache.prefetch }
    }
    models        = module.model_endpoints.chart_models
    metrics       = { podAnnotations = var.metrics_pod_annotations }
    networkPolicy = { enabled = var.network_policy_enabled }
  }
}
