variable "ami_type" {
  description = "EKS AMI type of the GPU node group. Must be one of `AL2023_x86_64_NVIDIA` (NVIDIA driver and container toolkit; the device plugin is installed by the cluster module) or `BOTTLEROCKET_x86_64_NVIDIA` (runs its own device plugin)."
  type        = string
  default     = "AL2023_x86_64_NVIDIA"

  validation {
    condition     = contains(["AL2023_x86_64_NVIDIA", "BOTTLEROCKET_x86_64_NVIDIA"], var.ami_type)
    error_message = "`ami_type` = \"${var.ami_type}\", must be one of AL2023_x86_64_NVIDIA, BOTTLEROCKET_x86_64_NVIDIA."
  }
}

variable "node_cache_host_path" {
  description = "Host directory of the node-local image cache, put on the instance-store NVMe. Must be an absolute path under `/mnt/` (Bottlerocket binds ephemeral storage only there), without `..`, and outside the mount points the AMIs use themselves (`/mnt/k8s-disks`, `/mnt/.ephemeral`)."
  type        = string
  default     = "/mnt/thaw-cache"

  validation {
    condition = alltrue([
      can(regex("^/mnt/[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$", var.node_cache_host_path)),
      !strcontains(var.node_cache_host_path, ".."),
      !startswith(var.node_cache_host_path, "/mnt/k8s-disks"),
      !startswith(var.node_cache_host_path, "/mnt/.ephemeral"),
    ])
    error_message = "`node_cache_host_path` = \"${var.node_cache_host_path}\", must be an absolute path under /mnt/ without `..`, outside /mnt/k8s-disks and /mnt/.ephemeral."
  }
}

variable "ami_version" {
  description = "Version part of the Karpenter AMI alias (`al2023@<version>`, `bottlerocket@<version>`). Must be `latest` or a version such as v20251120 (AL2023) or v1.50.0 (Bottlerocket); pin one in production so nodes do not change AMI under you."
  type        = string
  default     = "latest"

  validation {
    condition     = can(regex("^(latest|v[0-9][0-9.]*)$", var.ami_version))
    error_message = "`ami_version` = \"${var.ami_version}\", must be latest or a version such as v20251120."
  }
}

variable "runtime_uid" {
  description = "User id the runtime pods run as (the chart's podSecurityContext.runAsUser); the node cache directory is owned by it. Must be an integer in [1, 2147483647]."
  type        = number
  default     = 10001

  validation {
    condition     = var.runtime_uid >= 1 && var.runtime_uid <= 2147483647 && floor(var.runtime_uid) == var.runtime_uid
    error_message = "`runtime_uid` = ${var.runtime_uid}, must be an integer in [1, 2147483647]."
  }
}

variable "runtime_gid" {
  description = "Group id of the runtime pods (the chart's fsGroup); the node cache directory is in it. Must be an integer in [1, 2147483647]."
  type        = number
  default     = 10001

  validation {
    condition     = var.runtime_gid >= 1 && var.runtime_gid <= 2147483647 && floor(var.runtime_gid) == var.runtime_gid
    error_message = "`runtime_gid` = ${var.runtime_gid}, must be an integer in [1, 2147483647]."
  }
}
