variable "region" {
  description = "AWS region to provision in; must look like an AWS region (e.g. us-east-1)."
  type        = string

  validation {
    condition     = can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]$", var.region))
    error_message = "`region` = \"${var.region}\", must be an AWS region such as us-east-1."
  }
}

variable "name" {
  description = "Name of this Thaw installation: the EKS cluster, IAM role prefix and default bucket name derive from it. Must be 1-30 characters of [a-z0-9-], starting with a letter (the derived bucket and log bucket names must fit S3's 63)."
  type        = string
  default     = "thaw"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,29}$", var.name))
    error_message = "`name` = \"${var.name}\", must be 1-30 characters of [a-z0-9-] starting with a letter."
  }
}

variable "images_bucket_name" {
  description = "Name of the images bucket; null means `<name>-images-<account id>` (S3 names are global)."
  type        = string
  default     = null
}

variable "vpc_id" {
  description = "Existing VPC to run in (the cluster module validates it)."
  type        = string
}

variable "private_subnet_ids" {
  description = "Private subnets of that VPC, in at least two availability zones, with a NAT or VPC endpoints for ECR, S3 and EKS (the cluster module validates them)."
  type        = list(string)
}

variable "kubernetes_version" {
  description = "Kubernetes version of the cluster (the cluster module validates it)."
  type        = string
  default     = "1.35"
}

variable "endpoint_public_access" {
  description = "Also expose the Kubernetes API publicly (restricted to `endpoint_public_access_cidrs`). Off: run Terraform from inside the VPC."
  type        = bool
  default     = false
}

variable "endpoint_public_access_cidrs" {
  description = "CIDR blocks allowed to reach a public API endpoint (the cluster module validates them)."
  type        = list(string)
  default     = []
}

variable "cpu_node_group" {
  description = "The fixed-size system node group: activators, Karpenter, cluster add-ons (see the cluster module for fields and rules)."
  type = object({
    instance_types = optional(list(string), ["m6i.large"])
    min_size       = optional(number, 2)
    max_size       = optional(number, 4)
    desired_size   = optional(number, 2)
    disk_size_gib  = optional(number, 50)
  })
  default = {}
}

variable "gpu_node_pool" {
  description = "Karpenter's GPU NodePool: AMI, instance types, capacity types, max_gpus ceiling (see the cluster module). GPU nodes exist only while GPU pods need them."
  type = object({
    ami_type       = optional(string, "AL2023_x86_64_NVIDIA")
    ami_version    = optional(string, "latest")
    instance_types = optional(list(string), ["g6.xlarge"])
    capacity_types = optional(list(string), ["ON_DEMAND"])
    max_gpus       = optional(number, 8)
    disk_size_gib  = optional(number, 100)
  })
  default = {}
}

variable "cpu_node_pool" {
  description = "Karpenter's CPU NodePool for the CPU warm pools (see the cluster module)."
  type = object({
    ami_version    = optional(string, "latest")
    instance_types = optional(list(string), ["m6i.xlarge", "m6i.2xlarge"])
    capacity_types = optional(list(string), ["ON_DEMAND"])
    max_vcpus      = optional(number, 64)
    disk_size_gib  = optional(number, 50)
  })
  default = {}
}

variable "image" {
  description = "The CPU image: registry, repository, tag, digest, pull_policy, pull_secrets (see the chart_values module; docs/kubernetes.md says how to push it to ECR)."
  type = object({
    registry     = optional(string, "ghcr.io")
    repository   = optional(string, "thaw-serve/thaw")
    tag          = optional(string, "0.1.0")
    digest       = optional(string, "")
    pull_policy  = optional(string, "IfNotPresent")
    pull_secrets = optional(list(string), [])
  })
  default = {}
}

variable "image_gpu" {
  description = "The CUDA image, the same fields as `image`."
  type = object({
    registry     = optional(string, "ghcr.io")
    repository   = optional(string, "thaw-serve/thaw-cuda")
    tag          = optional(string, "0.1.0")
    digest       = optional(string, "")
    pull_policy  = optional(string, "IfNotPresent")
    pull_secrets = optional(list(string), [])
  })
  default = {}
}

variable "runtime" {
  description = "Warm pools per placement class: pool_replicas (each CPU class), gpu_pool_replicas (each GPU class; a warm GPU pod is a GPU-hour per hour, default 0), class_pool_replicas, resources (see the chart_values module)."
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
}

variable "node_cache" {
  description = "Node-local image cache: host_path, max_bytes (each node's byte budget; 0 = unbounded), prefetch (see the chart_values module)."
  type = object({
    host_path = optional(string, "/mnt/thaw-cache")
    max_bytes = optional(number, 0)
    prefetch  = optional(bool, true)
  })
  default = {}
}

variable "models" {
  description = "One endpoint per model: name, gpu, instance_type (the two pick its placement class), min/max replicas, target and container concurrency, scale_to_zero_grace_s, activation_timeout_s, hot; image_uri is refused (see the model_endpoints module for the rules)."
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
  description = "Scaling settings for models that leave them unset (see the model_endpoints module)."
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

variable "tags" {
  description = "Tags added to every AWS resource."
  type        = map(string)
  default     = {}
}
