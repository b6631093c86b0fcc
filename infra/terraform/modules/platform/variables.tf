variable "release_name" {
  description = "Helm release name. Must be a DNS-1123 label of at most 53 characters (Helm's limit)."
  type        = string
  default     = "thaw"

  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]{0,51}[a-z0-9])?$", var.release_name))
    error_message = "`release_name` = \"${var.release_name}\", must be a DNS-1123 label of at most 53 characters."
  }
}

variable "namespace" {
  description = "Namespace to install into; it must exist (the identity module creates it). Must be a DNS-1123 label."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", var.namespace))
    error_message = "`namespace` = \"${var.namespace}\", must be a DNS-1123 label."
  }
}

variable "chart_path" {
  description = "Path of the Thaw Helm chart. Null means the in-repo chart, deploy/helm/thaw at the repository root."
  type        = string
  default     = null
}

variable "timeout_s" {
  description = "Seconds Helm waits for the release's pods to become ready before the apply fails and rolls back. Must be in [60, 3600]. The default covers a first install: Karpenter launching a CPU node for the default warm pool (1-2 min), pulling the CPU image (~1.4 GiB: 1-2 min), the S3 repository copy (bounded by the chart's modelRepository.s3Sync.timeoutSeconds, 600 s) and the pods' startup probes. GPU pools keep no warm pod by default, so the release never waits for a GPU node."
  type        = number
  default     = 1200

  validation {
    condition     = var.timeout_s >= 60 && var.timeout_s <= 3600
    error_message = "`timeout_s` = ${var.timeout_s}, must be in [60, 3600]."
  }
}

variable "extra_values" {
  description = "Further values documents merged after the derived values, for chart settings this module does not model (keys as in CHART_VALUES.md). Each must be a YAML mapping."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for doc in var.extra_values : can(keys(yamldecode(doc)))])
    error_message = "`extra_values` entries must each be a YAML mapping of chart values."
  }
}

# The variables below are forwarded verbatim to ../chart_values and are copies of its declarations
# (same type, default and validation, so errors name this module's inputs);
# tests/unit/infra/test_terraform_structure.py keeps the two identical.

variable "image" {
  description = "The CPU image (activators, CPU warm pools): `registry` (e.g. <account>.dkr.ecr.<region>.amazonaws.com; empty = none), `repository`, `tag`, `digest` (sha256:...; wins over the tag), `pull_policy` (must be one of Always, IfNotPresent, Never), `pull_secrets` (names of docker-registry Secrets in the namespace)."
  type = object({
    registry     = optional(string, "ghcr.io")
    repository   = optional(string, "thaw-serve/thaw")
    tag          = optional(string, "0.1.0")
    digest       = optional(string, "")
    pull_policy  = optional(string, "IfNotPresent")
    pull_secrets = optional(list(string), [])
  })
  default = {}

  validation {
    condition     = contains(["Always", "IfNotPresent", "Never"], var.image.pull_policy)
    error_message = "`image.pull_policy` = \"${var.image.pull_policy}\", must be one of Always, IfNotPresent, Never."
  }

  validation {
    condition     = can(regex("^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", var.image.tag)) && can(regex("^(sha256:[0-9a-f]{64})?$", var.image.digest))
    error_message = "`image.tag` = \"${var.image.tag}\" must be a container image tag ([A-Za-z0-9_.-], at most 128 characters) and `image.digest` empty or sha256:<64 hex digits>."
  }
}

variable "image_gpu" {
  description = "The CUDA image (GPU warm pools), the same fields as `image`; `pull_policy` must be one of Always, IfNotPresent, Never."
  type = object({
    registry     = optional(string, "ghcr.io")
    repository   = optional(string, "thaw-serve/thaw-cuda")
    tag          = optional(string, "0.1.0")
    digest       = optional(string, "")
    pull_policy  = optional(string, "IfNotPresent")
    pull_secrets = optional(list(string), [])
  })
  default = {}

  validation {
    condition     = contains(["Always", "IfNotPresent", "Never"], var.image_gpu.pull_policy)
    error_message = "`image_gpu.pull_policy` = \"${var.image_gpu.pull_policy}\", must be one of Always, IfNotPresent, Never."
  }

  validation {
    condition     = can(regex("^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", var.image_gpu.tag)) && can(regex("^(sha256:[0-9a-f]{64})?$", var.image_gpu.digest))
    error_message = "`image_gpu.tag` = \"${var.image_gpu.tag}\" must be a container image tag and `image_gpu.digest` empty or sha256:<64 hex digits>."
  }
}

variable "service_account" {
  description = "Service accounts: `name` of the activator's (the chart creates it), its `annotations` (IRSA only; Pod Identity needs none), and `runtime_name`, the runtime pods' (read images only). Names must be DNS-1123 labels."
  type = object({
    name         = optional(string, "thaw")
    annotations  = optional(map(string), {})
    runtime_name = optional(string, "thaw-runtime")
  })
  default = {}

  validation {
    condition = alltrue([
      for n in [var.service_account.name, var.service_account.runtime_name] : can(regex("^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", n))
    ])
    error_message = "`service_account.name` and `runtime_name` must be DNS-1123 labels (lowercase alphanumerics and '-', at most 63 characters)."
  }
}

variable "activator" {
  description = "Activator deployment: `replicas` (must be >= 2: active-active behind a PodDisruptionBudget), `lease_duration_seconds` of the scaling leader's Lease (must be in [5, 300]), `node_selector` and `tolerations` (e.g. the system node group), `extra_args`, and `resources` (requests/limits maps)."
  type = object({
    replicas               = optional(number, 2)
    lease_duration_seconds = optional(number, 15)
    node_selector          = optional(map(string), {})
    tolerations = optional(list(object({
      key      = string
      operator = string
      effect   = string
    })), [])
    extra_args = optional(list(string), [])
    resources = optional(object({
      requests = optional(map(string), { cpu = "500m", memory = "256Mi" })
      limits   = optional(map(string), { memory = "1Gi" })
    }), {})
  })
  default = {}

  validation {
    condition     = var.activator.replicas >= 2 && var.activator.replicas <= 20 && floor(var.activator.replicas) == var.activator.replicas
    error_message = "`activator.replicas` = ${var.activator.replicas}, must be an integer in [2, 20] (active-active)."
  }

  validation {
    condition     = var.activator.lease_duration_seconds >= 5 && var.activator.lease_duration_seconds <= 300
    error_message = "`activator.lease_duration_seconds` = ${var.activator.lease_duration_seconds}, must be in [5, 300]."
  }
}

variable "runtime" {
  description = "Runtime warm pools, one per placement class (models' `gpu` and `instance_type`). `pool_replicas`: idle warm pods of each CPU class (must be an integer in [0, 100]); `gpu_pool_replicas`: of each GPU class (must be an integer in [0, 100]; default 0, because a warm GPU pod is a GPU-hour per hour, paid for idle; 0 = scale to zero, a cold start waits for a node); `class_pool_replicas`: per-class overrides (each must be an integer in [0, 100]). `arena_bytes`, `preload_frameworks`; CPU pools' `node_selector`, `tolerations` and `resources`; GPU pools' `gpu_resources` (nvidia.com/gpu is added per class)."
  type = object({
    pool_replicas       = optional(number, 1)
    gpu_pool_replicas   = optional(number, 0)
    class_pool_replicas = optional(map(number), {})
    arena_bytes         = optional(number, 0)
    preload_frameworks  = optional(list(string), ["onnxruntime", "torch"])
    node_selector       = optional(map(string), {})
    tolerations = optional(list(object({
      key      = string
      operator = string
      effect   = string
    })), [])
    resources = optional(object({
      requests = optional(map(string), { cpu = "1", memory = "2Gi" })
      limits   = optional(map(string), { memory = "8Gi" })
    }), {})
    gpu_resources = optional(object({
      requests = optional(map(string), { cpu = "2", memory = "8Gi" })
      limits   = optional(map(string), { memory = "24Gi" })
    }), {})
  })
  default = {}

  validation {
    condition = alltrue([
      for n in concat([var.runtime.pool_replicas, var.runtime.gpu_pool_replicas], values(var.runtime.class_pool_replicas)) : n >= 0 && n <= 100 && floor(n) == n
    ])
    error_message = "`runtime.pool_replicas`, `gpu_pool_replicas` and each `class_pool_replicas` must be an integer in [0, 100]."
  }

  validation {
    condition     = var.runtime.arena_bytes >= 0 && floor(var.runtime.arena_bytes) == var.runtime.arena_bytes
    error_message = "`runtime.arena_bytes` = ${var.runtime.arena_bytes}, must be a whole number of bytes >= 0."
  }
}

variable "node_class_selectors" {
  description = "Extra nodeSelector labels of the node pools: `cpu` (added to CPU warm pools) and `gpu` (added to GPU warm pools, beside the GPU label), e.g. the cluster module's `cpu_pod_node_selector` / `gpu_pod_node_selector` (Karpenter's thaw.dev/node-class)."
  type = object({
    cpu = optional(map(string), {})
    gpu = optional(map(string), {})
  })
  default = {}
}

variable "model_repository" {
  description = "Where the Triton model repository comes from: `source` must be one of configMap, pvc, s3, with the matching `config_map_name`, `pvc_name` or `s3_uri` (s3://bucket/prefix) set."
  type = object({
    source          = string
    config_map_name = optional(string, "")
    pvc_name        = optional(string, "")
    s3_uri          = optional(string, "")
  })

  validation {
    condition     = contains(["configMap", "pvc", "s3"], var.model_repository.source)
    error_message = "`model_repository.source` = \"${var.model_repository.source}\", must be one of configMap, pvc, s3."
  }

  validation {
    condition = (
      var.model_repository.source == "configMap" ? var.model_repository.config_map_name != "" :
      var.model_repository.source == "pvc" ? var.model_repository.pvc_name != "" :
      can(regex("^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$", var.model_repository.s3_uri))
    )
    error_message = "`model_repository`: source \"${var.model_repository.source}\" must come with its field set (config_map_name, pvc_name, or an s3://bucket/prefix s3_uri)."
  }
}

variable "images_store_uri" {
  description = "Snapshot image store of every model without its own `image_uri`; must be an s3://bucket/prefix URI (the images_bucket module's `images_store_uri`)."
  type        = string

  validation {
    condition     = can(regex("^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$", var.images_store_uri))
    error_message = "`images_store_uri` = \"${var.images_store_uri}\", must be an s3://bucket/prefix URI."
  }
}

variable "images_region" {
  description = "AWS region of the images bucket; must look like an AWS region (e.g. us-east-1)."
  type        = string

  validation {
    condition     = can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]$", var.images_region))
    error_message = "`images_region` = \"${var.images_region}\", must be an AWS region such as us-east-1."
  }
}

variable "node_cache" {
  description = "Node-local image cache: `host_path` (on the GPU nodes' instance-store NVMe; the gpu_nodes module validates it), `max_bytes` (the byte budget of each node's cache, `thaw serve --cache-max-bytes`: least recently used chunks are evicted to fit; must be >= 0; 0 = unbounded), `prefetch` (DaemonSet prefetching hot models' images)."
  type = object({
    host_path = optional(string, "/mnt/thaw-cache")
    max_bytes = optional(number, 0)
    prefetch  = optional(bool, true)
  })
  default = {}

  validation {
    condition     = var.node_cache.max_bytes >= 0 && floor(var.node_cache.max_bytes) == var.node_cache.max_bytes
    error_message = "`node_cache.max_bytes` = ${var.node_cache.max_bytes}, must be a whole number of bytes >= 0 (0 = unbounded)."
  }
}

variable "gpu_ami_type" {
  description = "AMI type of the GPU node group, handed to the gpu_nodes module (which validates it) so the runtime's GPU pods get exactly the scheduling that node group was given."
  type        = string
  default     = "AL2023_x86_64_NVIDIA"
}

variable "models" {
  description = "One endpoint per model; see the model_endpoints module for the fields and their rules."
  type = list(object({
    name                  = string
    image_uri             = optional(string, "")
    gpu                   = optional(number, 0)
    instance_type         = optional(string, "")
    min_replicas          = optional(number)
    max_replicas          = optional(number)
    target_concurrency    = optional(number)
    container_concurrency = optional(number)
    scale_to_zero_grace_s = optional(number)
    activation_timeout_s  = optional(number)
    hot                   = optional(bool, false)
  }))
  default = []
}

variable "model_defaults" {
  description = "Scaling settings for models that leave them unset; see the model_endpoints module's `defaults`."
  type = object({
    min_replicas          = optional(number, 0)
    max_replicas          = optional(number, 4)
    target_concurrency    = optional(number, 8)
    container_concurrency = optional(number, 0)
    scale_to_zero_grace_s = optional(number, 30)
    activation_timeout_s  = optional(number, 300)
  })
  default = {}
}

variable "gpu_instance_types" {
  description = "Instance types the GPU node pool may launch; a GPU model's `instance_type` must be one of them when this is non-empty."
  type        = list(string)
  default     = []
}

variable "cpu_instance_types" {
  description = "Instance types the CPU node pool may launch; a CPU model's `instance_type` must be one of them when this is non-empty."
  type        = list(string)
  default     = []
}

variable "metrics_pod_annotations" {
  description = "Put prometheus.io/scrape, /port and /path annotations on activator and runtime pods."
  type        = bool
  default     = true
}

variable "network_policy_enabled" {
  description = "Render the chart's NetworkPolicy: only activator pods reach runtime pods; the control API is never exposed."
  type        = bool
  default     = true
}
