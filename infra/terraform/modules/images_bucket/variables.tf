variable "bucket_name" {
  description = "Name of the images bucket. Must be a valid S3 bucket name: 3-63 characters of lowercase letters, digits, '-' and '.', starting and ending with a letter or digit; at most 51 when the access-log bucket is created here (it is named `<bucket_name>-access-logs`)."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name)) && !strcontains(var.bucket_name, "..")
    error_message = "`bucket_name` = \"${var.bucket_name}\", must be a valid S3 bucket name (3-63 of [a-z0-9.-], alphanumeric ends)."
  }
}

variable "images_prefix" {
  description = "Key prefix of the snapshot image store inside the bucket. Must end with '/' and not start with one."
  type        = string
  default     = "images/"

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*/$", var.images_prefix))
    error_message = "`images_prefix` = \"${var.images_prefix}\", must be a key prefix such as images/ (ends with '/', no leading '/')."
  }
}

variable "repository_prefix" {
  description = "Key prefix of the Triton model repository inside the bucket. Must end with '/', not start with one, and differ from `images_prefix`."
  type        = string
  default     = "repository/"

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*/$", var.repository_prefix))
    error_message = "`repository_prefix` = \"${var.repository_prefix}\", must be a key prefix such as repository/ (ends with '/', no leading '/')."
  }
}

variable "access_log_bucket_name" {
  description = "Existing bucket that receives the images bucket's S3 server access logs. Null creates a hardened `<bucket_name>-access-logs` bucket here."
  type        = string
  default     = null

  validation {
    condition     = var.access_log_bucket_name == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.access_log_bucket_name))
    error_message = "`access_log_bucket_name` must be null or a valid S3 bucket name."
  }
}

variable "noncurrent_version_expiration_days" {
  description = "Days after which a replaced or deleted image version is removed. Must be in [1, 3650]."
  type        = number
  default     = 30

  validation {
    condition     = var.noncurrent_version_expiration_days >= 1 && var.noncurrent_version_expiration_days <= 3650
    error_message = "`noncurrent_version_expiration_days` = ${var.noncurrent_version_expiration_days}, must be in [1, 3650]."
  }
}

variable "abort_incomplete_multipart_upload_days" {
  description = "Days after which the parts of an unfinished multipart upload (an interrupted image push) are removed. Must be in [1, 365]."
  type        = number
  default     = 7

  validation {
    condition     = var.abort_incomplete_multipart_upload_days >= 1 && var.abort_incomplete_multipart_upload_days <= 365
    error_message = "`abort_incomplete_multipart_upload_days` = ${var.abort_incomplete_multipart_upload_days}, must be in [1, 365]."
  }
}

variable "access_log_retention_days" {
  description = "Days the created access-log bucket keeps logs. Must be in [1, 3650]."
  type        = number
  default     = 365

  validation {
    condition     = var.access_log_retention_days >= 1 && var.access_log_retention_days <= 3650
    error_message = "`access_log_retention_days` = ${var.access_log_retention_days}, must be in [1, 3650]."
  }
}

variable "kms_key_deletion_window_days" {
  description = "Waiting period before the bucket's KMS key is deleted after a destroy. Must be in [7, 30]."
  type        = number
  default     = 30

  validation {
    condition     = var.kms_key_deletion_window_days >= 7 && var.kms_key_deletion_window_days <= 30
    error_message = "`kms_key_deletion_window_days` = ${var.kms_key_deletion_window_days}, must be in [7, 30]."
  }
}

variable "force_destroy" {
  description = "Let `terraform destroy` delete the buckets with their objects. Keep false in production."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
