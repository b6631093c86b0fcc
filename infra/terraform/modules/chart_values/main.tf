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
  any_gpu_model = module.model_endpoints.max_gpus_per_replica > 0
  runtime_gpu   = coalesce(var.runtime.gpu_enabled, local.any_gpu_model)
  # A warm pod must fit the largest model it may be handed.
  runtime_gpu_count = coalesce(var.runtime.gpu_count, max(1, module.model_endpoints.max_gpus_per_replica))

  values = {
    image = {
      repository = var.image.repository
      tag        = var.image.tag
      pullPolicy = var.image.pull_policy
    }
    imageGpu = {
      repository = var.image.gpu_repository
      tag        = var.image.tag
    }
    serviceAccount = {
      create      = true
      name        = var.service_account.name
      annotations = var.service_account.annotations
    }
    activator = {
      replicas             = var.activator.replicas
      resources            = var.activator.resources
      nodeSelector         = var.activator.node_selector
      tolerations          = []
      leaseDurationSeconds = var.activator.lease_duration_seconds
      extraArgs            = var.activator.extra_args
    }
    runtime = {
      serviceAccountName = var.service_account.runtime_name
      pool               = { replicas = var.runtime.pool_replicas }
      gpu = {
        enabled      = local.runtime_gpu
        count        = local.runtime_gpu_count
        nodeSelector = module.gpu_nodes.pod_node_selector
        tolerations  = module.gpu_nodes.pod_tolerations
      }
      arenaBytes        = var.runtime.arena_bytes
      preloadFrameworks = var.runtime.preload_frameworks
      resources         = var.runtime.resources
      nodeSelector      = var.runtime.node_selector
      tolerations       = var.runtime.tolerations
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
