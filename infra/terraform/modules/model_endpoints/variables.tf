variable "models" {
  description = <<-EOT
    One endpoint per model. `name` must be a Thaw/Triton model name that is also a Kubernetes
    label value: 1-63 characters of `[A-Za-z0-9._-]`, starting and ending with a letter or digit,
    unique. `image_uri` must be empty: per-model image stores are not supported (every model's
    image comes from the platform's `images_store_uri`; refused rather than dropped). `gpu` =
    GPUs per replica, an integer in [0, 8] (0 = CPU). `instance_type` (optional) pins replicas to
    one EC2 instance type. `gpu` and `instance_type` together pick the model's placement class. Unset scaling fields take
    `defaults`; set ones must be in the activator's ranges: `min_replicas` in [0, 100],
    `max_replicas` in [1, 100], `target_concurrency` in [0.01, 100000], `container_concurrency`
    an integer in [0, 100000], `scale_to_zero_grace_s` in [0, 86400], `activation_timeout_s` in [0.5, 3600] (how long
    a request waits for a cold start; with nodes that scale to zero it must cover a node's launch,
    minutes on GPU). `hot` prefetches the image to every node cache.
  EOT
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

  validation {
    condition = alltrue([
      for m in var.models : can(regex("^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$", m.name))
    ])
    error_message = "`models[*].name`: ${jsonencode([for m in var.models : m.name if !can(regex("^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$", m.name))])} refused; a model name must be 1-63 characters of [A-Za-z0-9._-], starting and ending with a letter or digit (a Triton model name that is also a Kubernetes label value)."
  }

  validation {
    condition     = length(distinct([for m in var.models : m.name])) == length(var.models)
    error_message = "`models[*].name` must be unique; repeated: ${jsonencode(distinct([for i, m in var.models : m.name if contains(slice([for x in var.models : x.name], 0, i), m.name)]))}."
  }

  validation {
    condition = alltrue([
      for m in var.models : m.image_uri == ""
    ])
    error_message = "`models[*].image_uri` is not supported and must be empty (${jsonencode([for m in var.models : m.name if m.image_uri != ""])}): every model's image comes from the platform's images_store_uri (thaw serve --store)."
  }

  validation {
    condition     = alltrue([for m in var.models : m.gpu >= 0 && m.gpu <= 8 && floor(m.gpu) == m.gpu])
    error_message = "`models[*].gpu` must be an integer in [0, 8] (GPUs per replica; 0 = CPU)."
  }

  validation {
    condition = alltrue([
      for m in var.models : m.instance_type == "" || can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", m.instance_type))
    ])
    error_message = "`models[*].instance_type` must be empty or an EC2 instance type such as g6.xlarge."
  }

  validation {
    condition = alltrue([
      for m in var.models : (
        (m.min_replicas == null || try(m.min_replicas >= 0 && m.min_replicas <= 100 && floor(m.min_replicas) == m.min_replicas, false))
        && (m.max_replicas == null || try(m.max_replicas >= 1 && m.max_replicas <= 100 && floor(m.max_replicas) == m.max_replicas, false))
      )
    ])
    error_message = "`models[*].min_replicas` must be an integer in [0, 100] and `max_replicas` an integer in [1, 100]."
  }

  validation {
    condition = alltrue([
      for m in var.models : (
        (m.target_concurrency == null || try(m.target_concurrency >= 0.01 && m.target_concurrency <= 100000, false))
        && (m.container_concurrency == null || try(m.container_concurrency >= 0 && m.container_concurrency <= 100000 && floor(m.container_concurrency) == m.container_concurrency, false))
        && (m.scale_to_zero_grace_s == null || try(m.scale_to_zero_grace_s >= 0 && m.scale_to_zero_grace_s <= 86400, false))
        && (m.activation_timeout_s == null || try(m.activation_timeout_s >= 0.5 && m.activation_timeout_s <= 3600, false))
      )
    ])
    error_message = "`models[*].target_concurrency` must be in [0.01, 100000], `container_concurrency` an integer in [0, 100000], `scale_to_zero_grace_s` in [0, 86400], `activation_timeout_s` in [0.5, 3600]."
  }
}

variable "defaults" {
  description = "Scaling settings for models that leave them unset; same ranges as in `models`: `min_replicas` in [0, 100], `max_replicas` in [1, 100], `target_concurrency` in [0.01, 100000], `container_concurrency` in [0, 100000] (0 = unlimited), `scale_to_zero_grace_s` in [0, 86400], `activation_timeout_s` in [0.5, 3600] (default 300: a GPU node's launch and image pull fit)."
  type = object({
    min_replicas          = optional(number, 0)
    max_replicas          = optional(number, 4)
    target_concurrency    = optional(number, 8)
    container_concurrency = optional(number, 0)
    scale_to_zero_grace_s = optional(number, 30)
    activation_timeout_s  = optional(number, 300)
  })
  default = {}

  validation {
    condition = (
      var.defaults.min_replicas >= 0 && var.defaults.min_replicas <= 100 && floor(var.defaults.min_replicas) == var.defaults.min_replicas
      && var.defaults.max_replicas >= 1 && var.defaults.max_replicas <= 100 && floor(var.defaults.max_replicas) == var.defaults.max_replicas
      && var.defaults.min_replicas <= var.defaults.max_replicas
      && var.defaults.target_concurrency >= 0.01 && var.defaults.target_concurrency <= 100000
      && var.defaults.container_concurrency >= 0 && var.defaults.container_concurrency <= 100000 && floor(var.defaults.container_concurrency) == var.defaults.container_concurrency
      && var.defaults.scale_to_zero_grace_s >= 0 && var.defaults.scale_to_zero_grace_s <= 86400
      && var.defaults.activation_timeout_s >= 0.5 && var.defaults.activation_timeout_s <= 3600
    )
    error_message = "`defaults` out of range: min_replicas must be an integer in [0, 100] and <= max_replicas (an integer in [1, 100]), target_concurrency in [0.01, 100000], container_concurrency an integer in [0, 100000], scale_to_zero_grace_s in [0, 86400], activation_timeout_s in [0.5, 3600]."
  }
}

variable "gpu_node_selector" {
  description = "nodeSelector of GPU nodes (the gpu_nodes module's `pod_node_selector`), given to every model with `gpu` > 0."
  type        = map(string)
  default     = { "nvidia.com/gpu.present" = "true" }
}

variable "gpu_tolerations" {
  description = "Tolerations of the GPU node taints (the gpu_nodes module's `pod_tolerations`), given to every model with `gpu` > 0."
  type = list(object({
    key      = string
    operator = string
    effect   = string
  }))
  default = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]
}

variable "gpu_instance_types" {
  description = "Instance types of the GPU node group. When non-empty, a GPU model's `instance_type` must be one of them (otherwise its replicas could never schedule)."
  type        = list(string)
  default     = []
}

variable "cpu_instance_types" {
  description = "Instance types of the CPU node group. When non-empty, a CPU model's `instance_type` must be one of them (otherwise its replicas could never schedule)."
  type        = list(string)
  default     = []
}
