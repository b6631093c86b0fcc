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
  default     = "1.33"
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
  description = "CPU node group for the activator and system pods (see the cluster module for fields and rules)."
  type = object({
    instance_types = optional(list(string), ["m6i.large"])
    min_size       = optional(number, 2)
    max_size       = optional(number, 4)
    desired_size   = optional(number, 2)
    disk_size_gib  = optional(number, 50)
  })
  default = {}
}

variable "gpu_node_group" {
  description = "GPU node group for runtime replicas (see the cluster module for fields and rules)."
  type = object({
    ami_type       = optional(string, "AL2023_x86_64_NVIDIA")
    instance_types = optional(list(string), ["g6.xlarge"])
    capacity_type  = optional(string, "ON_DEMAND")
    min_size       = optional(number, 1)
    max_size       = optional(number, 2)
    desired_size   = optional(number, 1)
    disk_size_gib  = optional(number, 100)
  })
  default = {}
}

variable "image_tag" {
  description = "Tag of the Thaw container images (ghcr.io/thaw-serve/thaw and thaw-cuda); the chart_values module validates it."
  type        = string
  default     = "0.1.0"
}

variable "models" {
  description = "One endpoint per model: name, image_uri, gpu, instance_type, min/max replicas, target and container concurrency, scale_to_zero_grace_s, hot (see the model_endpoints module for the rules)."
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
  })
  default = {}
}

variable "tags" {
  description = "Tags added to every AWS resource."
  type        = map(string)
  default     = {}
}
