variable "name" {
  description = "Prefix of the NodePool and EC2NodeClass names (`<name>-gpu`, `<name>-cpu`). Must be 1-38 characters of [a-z0-9-], starting with a letter."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,37}$", var.name))
    error_message = "`name` = \"${var.name}\", must be 1-38 characters of [a-z0-9-] starting with a letter."
  }
}

variable "node_role_name" {
  description = "IAM role of the nodes Karpenter launches (the karpenter submodule's `node_iam_role_name`). Must be an IAM role name (1-64 characters of [A-Za-z0-9+=,.@_-])."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9+=,.@_-]{1,64}$", var.node_role_name))
    error_message = "`node_role_name` = \"${var.node_role_name}\", must be an IAM role name."
  }
}

variable "subnet_ids" {
  description = "Subnets Karpenter may launch nodes in (the cluster's private subnets). Must be at least one subnet ID (subnet-...)."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) > 0 && alltrue([for s in var.subnet_ids : can(regex("^subnet-[0-9a-f]{8,17}$", s))])
    error_message = "`subnet_ids` must hold at least one subnet ID (subnet-...)."
  }
}

variable "security_group_ids" {
  description = "Security groups of the launched nodes (the cluster's node security group). Must be at least one security group ID (sg-...)."
  type        = list(string)

  validation {
    condition     = length(var.security_group_ids) > 0 && alltrue([for s in var.security_group_ids : can(regex("^sg-[0-9a-f]{8,17}$", s))])
    error_message = "`security_group_ids` must hold at least one security group ID (sg-...)."
  }
}

variable "gpu" {
  description = "GPU NodePool: `ami_type` (AL2023_x86_64_NVIDIA or BOTTLEROCKET_x86_64_NVIDIA; the gpu_nodes module validates it), `ami_version` (Karpenter alias version, `latest` or pinned), `instance_types` (must be NVIDIA GPU instance types such as g6.xlarge, at least one; ones with instance-store NVMe put the node cache on it), `capacity_types` (each must be ON_DEMAND or SPOT), `max_gpus` (the pool's ceiling, must be an integer in [1, 1024]), `disk_size_gib` (must be >= 50: CUDA images are large)."
  type = object({
    ami_type       = optional(string, "AL2023_x86_64_NVIDIA")
    ami_version    = optional(string, "latest")
    instance_types = optional(list(string), ["g6.xlarge"])
    capacity_types = optional(list(string), ["ON_DEMAND"])
    max_gpus       = optional(number, 8)
    disk_size_gib  = optional(number, 100)
  })
  default = {}

  validation {
    condition = (
      length(var.gpu.instance_types) > 0
      && alltrue([for t in var.gpu.instance_types : can(regex("^(g[4-9][a-z]*|p[3-9][a-z]*|gr[0-9][a-z]*)\\.[a-z0-9]+$", t))])
      && length(var.gpu.capacity_types) > 0
      && alltrue([for c in var.gpu.capacity_types : contains(["ON_DEMAND", "SPOT"], c)])
      && var.gpu.max_gpus >= 1 && var.gpu.max_gpus <= 1024 && floor(var.gpu.max_gpus) == var.gpu.max_gpus
      && var.gpu.disk_size_gib >= 50
    )
    error_message = "`gpu` must have NVIDIA GPU instance types (g*/p* families), capacity_types of ON_DEMAND/SPOT, max_gpus an integer in [1, 1024], and disk_size_gib >= 50."
  }
}

variable "cpu" {
  description = "CPU NodePool for the CPU warm pools: `ami_version`, `instance_types` (at least one), `capacity_types` (each must be ON_DEMAND or SPOT), `max_vcpus` (the pool's ceiling, must be an integer in [1, 100000]), `disk_size_gib` (must be >= 20)."
  type = object({
    ami_version    = optional(string, "latest")
    instance_types = optional(list(string), ["m6i.xlarge", "m6i.2xlarge"])
    capacity_types = optional(list(string), ["ON_DEMAND"])
    max_vcpus      = optional(number, 64)
    disk_size_gib  = optional(number, 50)
  })
  default = {}

  validation {
    condition = (
      length(var.cpu.instance_types) > 0
      && length(var.cpu.capacity_types) > 0
      && alltrue([for c in var.cpu.capacity_types : contains(["ON_DEMAND", "SPOT"], c)])
      && var.cpu.max_vcpus >= 1 && var.cpu.max_vcpus <= 100000 && floor(var.cpu.max_vcpus) == var.cpu.max_vcpus
      && var.cpu.disk_size_gib >= 20
      && can(regex("^(latest|v[0-9][0-9.]*)$", var.cpu.ami_version))
    )
    error_message = "`cpu` must have instance types, capacity_types of ON_DEMAND/SPOT, max_vcpus an integer in [1, 100000], disk_size_gib >= 20 and ami_version latest or v<version>."
  }
}

variable "consolidate_after" {
  description = "How long a node must be empty before Karpenter removes it. Must be a duration such as 30s, 5m or 1h."
  type        = string
  default     = "5m"

  validation {
    condition     = can(regex("^[0-9]+(s|m|h)$", var.consolidate_after))
    error_message = "`consolidate_after` = \"${var.consolidate_after}\", must be a duration such as 30s, 5m or 1h."
  }
}

variable "expire_after" {
  description = "Age at which Karpenter replaces a node (new AMI, patches). Must be a duration in hours such as 720h, or Never."
  type        = string
  default     = "720h"

  validation {
    condition     = can(regex("^([0-9]+h|Never)$", var.expire_after))
    error_message = "`expire_after` = \"${var.expire_after}\", must be a duration in hours such as 720h, or Never."
  }
}

variable "node_cache_host_path" {
  description = "Host path of the node-local image cache (the gpu_nodes module validates it)."
  type        = string
  default     = "/mnt/thaw-cache"
}

variable "runtime_uid" {
  description = "User id of the runtime pods, owner of the node cache (the gpu_nodes module validates it)."
  type        = number
  default     = 10001
}

variable "runtime_gid" {
  description = "Group id of the runtime pods (the gpu_nodes module validates it)."
  type        = number
  default     = 10001
}

variable "tags" {
  description = "Tags Karpenter puts on the instances, volumes and network interfaces it launches."
  type        = map(string)
  default     = {}
}
