# The S3 bucket that holds snapshot images (under `images_prefix`) and the Triton model repository
# (under `repository_prefix`): no public access, TLS only, versioned, SSE-KMS with its own key,
# lifecycle rules for interrupted pushes and replaced versions, and server access logs.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}

locals {
  account_id       = data.aws_caller_identity.current.account_id
  create_log_sink  = var.access_log_bucket_name == null
  log_bucket_name  = local.create_log_sink ? "${var.bucket_name}-access-logs" : var.access_log_bucket_name
  log_bucket_arn   = "arn:${data.aws_partition.current.partition}:s3:::${local.log_bucket_name}"
  images_log_label = "s3-access/${var.bucket_name}/"
}

# ---------------------------------------------------------------------------------------------
# KMS key
# ---------------------------------------------------------------------------------------------

data "aws_iam_policy_document" "kms" {
  # checkov:skip=CKV_AWS_109:A key policy; "*" is this key. The account root must administer it, or no IAM policy could grant it.
  # checkov:skip=CKV_AWS_111:A key policy; "*" is this key. Use is granted per role by the identity module's IAM policies.
  # checkov:skip=CKV_AWS_356:A key policy; "*" is this key, not every resource.
  # The account root administers the key; IAM policies (the identity module's roles) then grant
  # use of it. Without this statement no IAM policy could grant access to the key at all.
  statement {
    sid       = "AccountAdministersKey"
    actions   = ["kms:*"]
    resources = ["*"] # in a key policy, "*" is this key
    principals {
      type        = "AWS"
      identifiers = ["arn:${data.aws_partition.current.partition}:iam::${local.account_id}:root"]
    }
  }
}

resource "aws_kms_key" "images" {
  description             = "Thaw images bucket ${var.bucket_name}"
  enable_key_rotation     = true
  deletion_window_in_days = var.kms_key_deletion_window_days
  policy                  = data.aws_iam_policy_document.kms.json
  tags                    = var.tags
}

resource "aws_kms_alias" "images" {
  # Alias names allow [A-Za-z0-9/_-] only; S3 names may hold dots (my.bucket -> alias/my-bucket).
  name          = "alias/${replace(var.bucket_name, ".", "-")}"
  target_key_id = aws_kms_key.images.key_id
}

# ---------------------------------------------------------------------------------------------
# Images bucket
# ---------------------------------------------------------------------------------------------

resource "aws_s3_bucket" "images" {
  # checkov:skip=CKV_AWS_144:Images are rebuilt from the model repository by `thaw snapshot build`; cross-region replication is a cost choice left to the caller.
  # checkov:skip=CKV2_AWS_62:Nothing consumes object events: the runtime and the prefetcher read images on demand.
  bucket        = var.bucket_name
  force_destroy = var.force_destroy
  tags          = var.tags

  lifecycle {
    # The identity module grants writes on images and reads on the repository by prefix; nested
    # or equal prefixes would let the image builder overwrite the model repository.
    precondition {
      condition     = !startswith(var.images_prefix, var.repository_prefix) && !startswith(var.repository_prefix, var.images_prefix)
      error_message = "`images_prefix` = \"${var.images_prefix}\" and `repository_prefix` = \"${var.repository_prefix}\" must not contain one another."
    }
  }
}

resource "aws_s3_bucket_public_access_block" "images" {
  bucket                  = aws_s3_bucket.images.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "images" {
  bucket = aws_s3_bucket.images.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_versioning" "images" {
  bucket = aws_s3_bucket.images.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "images" {
  bucket = aws_s3_bucket.images.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = aws_kms_key.images.arn
    }
    # One data key per bucket instead of per object: far fewer KMS calls on many-chunk images.
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "images" {
  bucket = aws_s3_bucket.images.id

  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"
    filter {}
    abort_incomplete_multipart_upload {
      days_after_initiation = var.abort_incomplete_multipart_upload_days
    }
  }

  rule {
    id     = "expire-noncurrent-versions"
    status = "Enabled"
    filter {}
    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_expiration_days
    }
    expiration {
      expired_object_delete_marker = true
    }
  }

  # Lifecycle rules on a versioned bucket act on versions; enable versioning first.
  depends_on = [aws_s3_bucket_versioning.images]
}

resource "aws_s3_bucket_logging" "images" {
  bucket        = aws_s3_bucket.images.id
  target_bucket = local.create_log_sink ? aws_s3_bucket.access_logs[0].id : var.access_log_bucket_name
  target_prefix = local.images_log_label
}

data "aws_iam_policy_document" "images" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      aws_s3_bucket.images.arn,
      "${aws_s3_bucket.images.arn}/*",
    ]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }

  statement {
    sid     = "DenyOutdatedTLS"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      aws_s3_bucket.images.arn,
      "${aws_s3_bucket.images.arn}/*",
    ]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "NumericLessThan"
      variable = "s3:TlsVersion"
      values   = ["1.2"]
    }
  }
}

resource "aws_s3_bucket_policy" "images" {
  bucket = aws_s3_bucket.images.id
  policy = data.aws_iam_policy_document.images.json

  # S3 refuses a policy while the public access block is being written.
  depends_on = [aws_s3_bucket_public_access_block.images]
}

# ---------------------------------------------------------------------------------------------
# Access-log bucket (when none is given)
# ---------------------------------------------------------------------------------------------

resource "aws_s3_bucket" "access_logs" {
  # checkov:skip=CKV_AWS_18:This is the access-log sink; logging it into itself would log its own log writes forever.
  # checkov:skip=CKV_AWS_144:Access logs are an audit trail of this region's bucket; replicating them is the caller's choice.
  # checkov:skip=CKV_AWS_145:S3 server access log delivery only supports SSE-S3 (AES256) on the target bucket, not SSE-KMS.
  # checkov:skip=CKV2_AWS_62:Nothing consumes object events on the log sink.
  count         = local.create_log_sink ? 1 : 0
  bucket        = local.log_bucket_name
  force_destroy = var.force_destroy
  tags          = var.tags

  lifecycle {
    precondition {
      condition     = length(local.log_bucket_name) <= 63
      error_message = "`bucket_name` = \"${var.bucket_name}\" must be at most 51 characters when the access-log bucket is created here (\"${local.log_bucket_name}\" is longer than S3's 63); shorten it or set access_log_bucket_name."
    }
  }
}

resource "aws_s3_bucket_public_access_block" "access_logs" {
  count                   = local.create_log_sink ? 1 : 0
  bucket                  = aws_s3_bucket.access_logs[0].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "access_logs" {
  count  = local.create_log_sink ? 1 : 0
  bucket = aws_s3_bucket.access_logs[0].id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_versioning" "access_logs" {
  count  = local.create_log_sink ? 1 : 0
  bucket = aws_s3_bucket.access_logs[0].id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "access_logs" {
  count  = local.create_log_sink ? 1 : 0
  bucket = aws_s3_bucket.access_logs[0].id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "access_logs" {
  count  = local.create_log_sink ? 1 : 0
  bucket = aws_s3_bucket.access_logs[0].id

  rule {
    id     = "expire-access-logs"
    status = "Enabled"
    filter {}
    expiration {
      days = var.access_log_retention_days
    }
    noncurrent_version_expiration {
      noncurrent_days = 1
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }

  depends_on = [aws_s3_bucket_versioning.access_logs]
}

data "aws_iam_policy_document" "access_logs" {
  count = local.create_log_sink ? 1 : 0

  statement {
    sid       = "S3ServerAccessLogDelivery"
    actions   = ["s3:PutObject"]
    resources = ["${local.log_bucket_arn}/${local.images_log_label}*"]
    principals {
      type        = "Service"
      identifiers = ["logging.s3.amazonaws.com"]
    }
    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = [aws_s3_bucket.images.arn]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }

  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [local.log_bucket_arn, "${local.log_bucket_arn}/*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "access_logs" {
  count  = local.create_log_sink ? 1 : 0
  bucket = aws_s3_bucket.access_logs[0].id
  policy = data.aws_iam_policy_document.access_logs[0].json

  depends_on = [aws_s3_bucket_public_access_block.access_logs]
}
