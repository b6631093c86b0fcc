variable "name" {
  description = "Prefix of the IAM role names (`<name>-activator`, `<name>-runtime`, `<name>-image-builder`). Must be 1-40 characters of [A-Za-z0-9+=,.@_-]."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9+=,.@_-]{1,40}$", var.name))
    error_message = "`name` = \"${var.name}\", must be 1-40 characters of [A-Za-z0-9+=,.@_-] (IAM role names are at most 64)."
  }
}

variable "cluster_name" {
  description = "EKS cluster the Pod Identity associations belong to (the cluster module's `cluster_name`)."
  type        = string
}

variable "namespace" {
  description = "Kubernetes namespace Thaw runs in; the activator's rights stop at it. Must be a DNS-1123 label and not a system namespace (default, kube-system, kube-public, kube-node-lease)."
  type        = string
  default     = "thaw"

  validation {
    condition = (
      can(regex("^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", var.namespace))
      && !contains(["default", "kube-system", "kube-public", "kube-node-lease"], var.namespace)
    )
    error_message = "`namespace` = \"${var.namespace}\", must be a DNS-1123 label that is not default, kube-system, kube-public or kube-node-lease."
  }
}

variable "image_builder_namespace" {
  description = "Namespace of the image builder's service account: not the platform's, so the activators (which may create pods there) cannot run as it. Must be a DNS-1123 label, different from `namespace`."
  type        = string
  default     = "thaw-build"

  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", var.image_builder_namespace)) && var.image_builder_namespace != var.namespace
    error_message = "`image_builder_namespace` = \"${var.image_builder_namespace}\", must be a DNS-1123 label different from `namespace`."
  }
}

variable "pod_security_version" {
  description = "Kubernetes minor version the Pod Security labels pin (`v<version>`), so a cluster upgrade does not change what the namespaces admit. Must look like 1.35."
  type        = string
  default     = "1.35"

  validation {
    condition     = can(regex("^1\\.[0-9]{2}$", var.pod_security_version))
    error_message = "`pod_security_version` = \"${var.pod_security_version}\", must be <major>.<minor> such as 1.35."
  }
}

variable "create_namespace" {
  description = "Create the namespace and the image builder's namespace here, with their Pod Security labels (the platform module then installs into the first). False when they already exist."
  type        = bool
  default     = true
}

variable "images_bucket_arn" {
  description = "ARN of the images bucket (the images_bucket module's `bucket_arn`). Must be an S3 bucket ARN."
  type        = string

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:s3:::[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.images_bucket_arn))
    error_message = "`images_bucket_arn` = \"${var.images_bucket_arn}\", must be an S3 bucket ARN (arn:aws:s3:::name)."
  }
}

variable "kms_key_arn" {
  description = "ARN of the KMS key that encrypts the bucket (the images_bucket module's `kms_key_arn`). Must be a KMS key ARN."
  type        = string

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[A-Za-z0-9-]+$", var.kms_key_arn))
    error_message = "`kms_key_arn` = \"${var.kms_key_arn}\", must be a KMS key ARN (arn:aws:kms:region:account:key/id)."
  }
}

variable "images_prefix" {
  description = "Key prefix of the snapshot image store in the bucket (runtime reads, image builder writes). Must end with '/'."
  type        = string
  default     = "images/"

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*/$", var.images_prefix))
    error_message = "`images_prefix` = \"${var.images_prefix}\", must be a key prefix such as images/."
  }
}

variable "repository_prefix" {
  description = "Key prefix of the Triton model repository in the bucket (activator, runtime and image builder read it). Must end with '/'."
  type        = string
  default     = "repository/"

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*/$", var.repository_prefix))
    error_message = "`repository_prefix` = \"${var.repository_prefix}\", must be a key prefix such as repository/."
  }
}

variable "service_accounts" {
  description = "Kubernetes service account names: `activator` and `runtime` (created by the chart: its serviceAccount.name and runtime.serviceAccountName), `image_builder` (created here when `create_image_builder_service_account`). Each must be a DNS-1123 label."
  type = object({
    activator     = optional(string, "thaw")
    runtime       = optional(string, "thaw-runtime")
    image_builder = optional(string, "thaw-image-builder")
  })
  default = {}

  validation {
    condition = alltrue([
      for n in values(var.service_accounts) : can(regex("^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", n))
    ])
    error_message = "`service_accounts` names must be DNS-1123 labels."
  }

  validation {
    condition     = length(distinct(values(var.service_accounts))) == 3
    error_message = "`service_accounts` must name three different accounts: each carries different rights."
  }
}

variable "create_activator_rbac" {
  description = "Create the activator's Role and RoleBinding here (pods, the pool Deployment and leases in `namespace` only; the same rules as the chart's). False (default) when the Helm chart grants them (its `rbac.create`, on by default); set this true only with the chart's `rbac.create=false`."
  type        = bool
  default     = false
}

variable "create_image_builder_service_account" {
  description = "Create the image builder's service account (the chart does not): run `thaw snapshot build/push` Jobs as it."
  type        = bool
  default     = true
}

variable "permissions_boundary_arn" {
  description = "IAM permissions boundary put on the three roles, or null for none."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags added to every AWS resource."
  type        = map(string)
  default     = {}
}
