# Provider-free: pure functions of its inputs, so `terraform test` runs it offline.
terraform {
  required_version = ">= 1.6.0, < 2.0.0"
}
