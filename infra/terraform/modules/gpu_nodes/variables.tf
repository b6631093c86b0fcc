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
