# A complete Thaw installation in an existing VPC: the images bucket, the EKS cluster (a system
# node group; Karpenter GPU and CPU node pools that scale to zero), the workload identities, and
# the platform with one endpoint per model. Order and duration of a first apply:
# infra/terraform/README.md, "What a first apply does, in order, and how long it takes".
# `terraform init && terraform apply` with a terraform.tfvars (see terraform.tfvars.example).

provider "aws" {
  region = var.region
}

# Both Kubernetes-side providers authenticate with a fresh token from the AWS CLI at every call,
# so a long apply never runs on an expired token.
provider "helm" {
  kubernetes = {
    host                   = module.cluster.cluster_endpoint
    cluster_ca_certificate = base64decode(module.cluster.cluster_certificate_authority_data)
    exec = {
      api_version = "client.authentication.k8s.io/v1beta1"
      command     = "aws"
      args        = ["eks", "get-token", "--cluster-name", module.cluster.cluster_name, "--region", var.region]
    }
  }
}

provider "kubernetes" {
  host                   = module.cluster.cluster_endpoint
  cluster_ca_certificate = base64decode(module.cluster.cluster_certificate_authority_data)
  exec {
    api_version = "client.authentication.k8s.io/v1beta1"
    command     = "aws"
    args        = ["eks", "get-token", "--cluster-name", module.cluster.cluster_name, "--region", var.region]
  }
}

data "aws_caller_identity" "current" {}

locals {
  bucket_name = coalesce(var.images_bucket_name, "${var.name}-images-${data.aws_caller_identity.current.account_id}")
  tags        = merge({ "app.kubernetes.io/part-of" = "thaw", "thaw.dev/installation" = var.name }, var.tags)
}

module "images_bucket" {
  source = "../../modules/images_bucket"

  bucket_name = local.bucket_name
  tags        = local.tags
}

module "cluster" {
  source = "../../modules/cluster"

  name                         = var.name
  kubernetes_version           = var.kubernetes_version
  vpc_id                       = var.vpc_id
  subnet_ids                   = var.private_subnet_ids
  endpoint_public_access       = var.endpoint_public_access
  endpoint_public_access_cidrs = var.endpoint_public_access_cidrs
  cpu_node_group               = var.cpu_node_group
  gpu_node_pool                = var.gpu_node_pool
  cpu_node_pool                = var.cpu_node_pool
  node_cache_host_path         = var.node_cache.host_path
  tags                         = local.tags
}

module "identity" {
  source = "../../modules/identity"

  name              = var.name
  cluster_name      = module.cluster.cluster_name
  images_bucket_arn = module.images_bucket.bucket_arn
  kms_key_arn       = module.images_bucket.kms_key_arn
  images_prefix     = module.images_bucket.images_prefix
  repository_prefix = module.images_bucket.repository_prefix
  tags              = local.tags
}

module "platform" {
  source = "../../modules/platform"

  namespace       = module.identity.namespace
  image           = var.image
  image_gpu       = var.image_gpu
  service_account = { name = module.identity.service_accounts.activator, runtime_name = module.identity.service_accounts.runtime }
  # The activators on the fixed-size system node group; warm pools on Karpenter's nodes.
  activator = { node_selector = module.cluster.system_node_selector }
  runtime   = var.runtime
  node_class_selectors = {
    cpu = module.cluster.cpu_pod_node_selector
    gpu = module.cluster.gpu_pod_node_selector
  }
  model_repository = { source = "s3", s3_uri = module.images_bucket.model_repository_uri }
  images_store_uri = module.images_bucket.images_store_uri
  images_region    = module.images_bucket.region
  node_cache       = var.node_cache
  gpu_ami_type     = module.cluster.gpu_ami_type

  models             = var.models
  model_defaults     = var.model_defaults
  gpu_instance_types = module.cluster.gpu_instance_types
  cpu_instance_types = module.cluster.cpu_instance_types

  # The release waits for its pods, so everything they need must exist first: the identity
  # module's Pod Identity associations and Role (pods get AWS credentials only if the association
  # exists when they start), and the whole cluster module: the system node group, Karpenter and
  # its NodePools (the warm pools' nodes are launched on demand), the device plugin (a GPU node
  # advertises nvidia.com/gpu only through it).
  depends_on = [module.identity, module.cluster]
}
