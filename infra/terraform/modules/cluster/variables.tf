variable "name" {
  description = "EKS cluster name. Must be 1-38 characters of [A-Za-z0-9-], starting with a letter (node group and IAM names are derived from it)."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z][A-Za-z0-9-]{0,37}$", var.name))
    error_message = "`name` = \"${var.name}\", must be 1-38 characters of [A-Za-z0-9-] starting with a letter."
  }
}

variable "kubernetes_version" {
  description = "Kubernetes `<major>.<minor>` version of the control plane and nodes; must look like 1.35 and be 1.33 or later (ValidatingAdmissionPolicy, Karpenter v1). Pick one in EKS standard support (`aws eks describe-cluster-versions`): past it, EKS bills extended support."
  type        = string
  default     = "1.35"

  validation {
    condition     = can(regex("^1\\.[0-9]{2}$", var.kubernetes_version)) && try(tonumber(split(".", var.kubernetes_version)[1]) >= 33, false)
    error_message = "`kubernetes_version` = \"${var.kubernetes_version}\", must be <major>.<minor>, 1.33 or later, such as 1.35."
  }
}

variable "vpc_id" {
  description = "VPC the cluster runs in; must be a VPC ID (vpc-...)."
  type        = string

  validation {
    condition     = can(regex("^vpc-[0-9a-f]{8,17}$", var.vpc_id))
    error_message = "`vpc_id` = \"${var.vpc_id}\", must be a VPC ID such as vpc-0123456789abcdef0."
  }
}

variable "subnet_ids" {
  description = "Private subnets for the control plane ENIs and the nodes; must be at least two subnet IDs (in different availability zones, as EKS requires)."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) >= 2 && alltrue([for s in var.subnet_ids : can(regex("^subnet-[0-9a-f]{8,17}$", s))])
    error_message = "`subnet_ids` must hold at least two subnet IDs (subnet-...)."
  }
}

variable "endpoint_public_access" {
  description = "Expose the Kubernetes API endpoint publicly as well. Off by default: the API is reachable from inside the VPC only (run Terraform from there, or set this with narrow `endpoint_public_access_cidrs`)."
  type        = bool
  default     = false
}

variable "endpoint_public_access_cidrs" {
  description = "CIDR blocks allowed to reach the public API endpoint when `endpoint_public_access` is on. Each must be a valid IPv4 CIDR; 0.0.0.0/0 is refused."
  type        = list(string)
  default     = []

  validation {
    condition = alltrue([
      for c in var.endpoint_public_access_cidrs : can(cidrhost(c, 0)) && c != "0.0.0.0/0"
    ])
    error_message = "`endpoint_public_access_cidrs` must be valid CIDR blocks other than 0.0.0.0/0."
  }
}

variable "enabled_log_types" {
  description = "Control-plane log types sent to CloudWatch; each must be one of api, audit, authenticator, controllerManager, scheduler. All five by default."
  type        = list(string)
  default     = ["api", "audit", "authenticator", "controllerManager", "scheduler"]

  validation {
    condition = length(var.enabled_log_types) > 0 && alltrue([
      for t in var.enabled_log_types : contains(["api", "audit", "authenticator", "controllerManager", "scheduler"], t)
    ])
    error_message = "`enabled_log_types` must be a non-empty subset of api, audit, authenticator, controllerManager, scheduler."
  }
}

variable "log_retention_days" {
  description = "Days CloudWatch keeps control-plane logs. Must be one of the values CloudWatch accepts (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)."
  type        = number
  default     = 365

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "`log_retention_days` = ${var.log_retention_days}, must be a CloudWatch retention value such as 90 or 365."
  }
}

variable "cpu_node_group" {
  description = "The `system` managed node group (activators, Karpenter, cluster add-ons; fixed size, never Karpenter's): `instance_types`, `min_size` <= `desired_size` <= `max_size` (min_size must be >= 2: the activator runs active-active), `disk_size_gib` (must be >= 20)."
  type = object({
    instance_types = optional(list(string), ["m6i.large"])
    min_size       = optional(number, 2)
    max_size       = optional(number, 4)
    desired_size   = optional(number, 2)
    disk_size_gib  = optional(number, 50)
  })
  default = {}

  validation {
    condition = (
      length(var.cpu_node_group.instance_types) > 0
      && var.cpu_node_group.min_size >= 2
      && var.cpu_node_group.min_size <= var.cpu_node_group.desired_size
      && var.cpu_node_group.desired_size <= var.cpu_node_group.max_size
      && var.cpu_node_group.disk_size_gib >= 20
    )
    error_message = "`cpu_node_group` must have instance types, 2 <= min_size <= desired_size <= max_size, and disk_size_gib >= 20."
  }
}

variable "gpu_node_pool" {
  description = "Karpenter's GPU NodePool (the node_pools module validates it): `ami_type` (AL2023_x86_64_NVIDIA or BOTTLEROCKET_x86_64_NVIDIA), `ami_version`, `instance_types` (NVIDIA GPU types; ones with instance-store NVMe, such as g6, g6e, p5, put the node cache on it), `capacity_types` (ON_DEMAND, SPOT), `max_gpus` (ceiling of the pool), `disk_size_gib`. No minimum: GPU nodes exist only while pods need them."
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
  description = "Karpenter's CPU NodePool for the CPU warm pools (the node_pools module validates it): `ami_version`, `instance_types`, `capacity_types`, `max_vcpus`, `disk_size_gib`."
  type = object({
    ami_version    = optional(string, "latest")
    instance_types = optional(list(string), ["m6i.xlarge", "m6i.2xlarge"])
    capacity_types = optional(list(string), ["ON_DEMAND"])
    max_vcpus      = optional(number, 64)
    disk_size_gib  = optional(number, 50)
  })
  default = {}
}

variable "consolidate_after" {
  description = "How long a Karpenter node must be empty before it is removed (the node_pools module validates it), e.g. 5m."
  type        = string
  default     = "5m"
}

variable "network_policy" {
  description = "Enforce NetworkPolicies (vpc-cni's network-policy agent). Off leaves the chart's NetworkPolicies unenforced."
  type        = bool
  default     = true
}

variable "karpenter_chart_version" {
  description = "Version of the Karpenter Helm chart (oci://public.ecr.aws/karpenter/karpenter). Must be a semantic version such as 1.14.1; keep it within Karpenter's compatibility matrix for `kubernetes_version`."
  type        = string
  default     = "1.14.1"

  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+$", var.karpenter_chart_version))
    error_message = "`karpenter_chart_version` = \"${var.karpenter_chart_version}\", must be a semantic version such as 1.14.1."
  }
}

variable "karpenter_chart_repository" {
  description = "Where the Karpenter chart comes from: its public OCI registry, or a mirror (an ECR repository of your own when the VPC has no NAT). Must be an oci:// or https:// URL."
  type        = string
  default     = "oci://public.ecr.aws/karpenter"

  validation {
    condition     = can(regex("^(oci|https)://", var.karpenter_chart_repository))
    error_message = "`karpenter_chart_repository` = \"${var.karpenter_chart_repository}\", must be an oci:// or https:// URL."
  }
}

variable "nvidia_device_plugin_image_repository" {
  description = "Repository of the device plugin's image when it is mirrored (a VPC without NAT: e.g. <account>.dkr.ecr.<region>.amazonaws.com/nvidia/k8s-device-plugin); null = the chart's own (nvcr.io)."
  type        = string
  default     = null
}

variable "nvidia_device_plugin_chart_repository" {
  description = "Where NVIDIA's device plugin chart comes from (a mirror when the VPC has no NAT). Must be an oci:// or https:// URL."
  type        = string
  default     = "https://nvidia.github.io/k8s-device-plugin"

  validation {
    condition     = can(regex("^(oci|https)://", var.nvidia_device_plugin_chart_repository))
    error_message = "`nvidia_device_plugin_chart_repository` = \"${var.nvidia_device_plugin_chart_repository}\", must be an oci:// or https:// URL."
  }
}

variable "node_cache_host_path" {
  description = "Host path of the node-local image cache, mounted on the GPU nodes' instance-store NVMe (the gpu_nodes module validates it)."
  type        = string
  default     = "/mnt/thaw-cache"
}

variable "nvidia_device_plugin_chart_version" {
  description = "Version of NVIDIA's `nvidia-device-plugin` Helm chart, installed when the GPU AMI needs it (AL2023). Must be a semantic version such as 0.19.0."
  type        = string
  default     = "0.19.0"

  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+$", var.nvidia_device_plugin_chart_version))
    error_message = "`nvidia_device_plugin_chart_version` = \"${var.nvidia_device_plugin_chart_version}\", must be a semantic version such as 0.19.0."
  }
}

variable "enable_cluster_creator_admin_permissions" {
  description = "Give the identity running Terraform cluster-admin through an EKS access entry (needed to install the charts in the same apply)."
  type        = bool
  default     = true
}

variable "access_entries" {
  description = "Further EKS access entries (terraform-aws-modules/eks v21 `access_entries` shape), e.g. for an operators' role."
  type = map(object({
    principal_arn     = string
    kubernetes_groups = optional(list(string))
    type              = optional(string, "STANDARD")
    policy_associations = optional(map(object({
      policy_arn = string
      access_scope = object({
        type       = string
        namespaces = optional(list(string))
      })
    })), {})
  }))
  default = {}
}

variable "tags" {
  description = "Tags added to every AWS resource."
  type        = map(string)
  default     = {}
}
