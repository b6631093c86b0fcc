output "bucket_name" {
  description = "Name of the images bucket."
  value       = aws_s3_bucket.images.id
}

output "bucket_arn" {
  description = "ARN of the images bucket (the identity module scopes its policies to it)."
  value       = aws_s3_bucket.images.arn
}

output "region" {
  description = "Region the bucket lives in (the chart's `images.region`)."
  value       = data.aws_region.current.region
}

output "kms_key_arn" {
  description = "ARN of the KMS key that encrypts the bucket; readers need kms:Decrypt on it, writers also kms:GenerateDataKey."
  value       = aws_kms_key.images.arn
}

output "images_prefix" {
  description = "Key prefix of the snapshot image store."
  value       = var.images_prefix
}

output "repository_prefix" {
  description = "Key prefix of the Triton model repository."
  value       = var.repository_prefix
}

output "images_store_uri" {
  description = "s3:// URI of the snapshot image store (the chart's `images.storeUri`; `thaw snapshot push --store` target)."
  value       = "s3://${aws_s3_bucket.images.id}/${var.images_prefix}"
}

output "model_repository_uri" {
  description = "s3:// URI of the Triton model repository (the chart's `modelRepository.s3Uri`; upload each model's directory here)."
  value       = "s3://${aws_s3_bucket.images.id}/${var.repository_prefix}"
}

output "access_log_bucket_name" {
  description = "Bucket that receives the images bucket's server access logs (under `s3-access/<bucket>/`)."
  value       = local.log_bucket_name
}
