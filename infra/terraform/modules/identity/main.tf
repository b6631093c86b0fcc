# Who may do what. AWS (EKS Pod Identity, one IAM role per service account):
#   runtime        reads images and the model repository;
#   image builder  reads the model repository and writes images;
#   activator      reads the model repository (it answers metadata at zero replicas).
# Kubernetes (RBAC): the activator manages pods and leases in its own namespace, nothing else.
# The image builder's account lives in a namespace of its own (`image_builder_namespace`), so a
# compromised activator, which may create pods in the platform's namespace, can never start one
# as the only identity allowed to write images. Pod Identity needs no service account annotation,
# so the chart's accounts work unchanged.
#
# Pod Security (namespace labels): the platform's namespace enforces `privileged`, warns and
# audits at `baseline`: its runtime pods mount the node cache as a hostPath, which baseline
# forbids and which PSA cannot exempt one volume of. The chart's ValidatingAdmissionPolicies
# enforce the rest of baseline there (and hostPath only at the cache path). The image builder's
# namespace enforces `restricted`.

locals {
  bucket = var.images_bucket_arn
  images = "${var.images_bucket_arn}/${var.images_prefix}*"
  repo   = "${var.images_bucket_arn}/${var.repository_prefix}*"
  sa     = var.service_accounts
  ns     = var.create_namespace ? kubernetes_namespace_v1.thaw[0].metadata[0].name : var.namespace
  # Where each account lives: the image builder outside the activators' namespace.
  sa_namespace = {
    activator     = local.ns
    runtime       = local.ns
    image_builder = var.create_namespace ? kubernetes_namespace_v1.image_builder[0].metadata[0].name : var.image_builder_namespace
  }
  pod_security_version = "v${var.pod_security_version}"
  policies = {
    activator     = data.aws_iam_policy_document.activator.json
    runtime       = data.aws_iam_policy_document.runtime.json
    image_builder = data.aws_iam_policy_document.image_builder.json
  }
  role_suffix = {
    activator     = "activator"
    runtime       = "runtime"
    image_builder = "image-builder"
  }
}

# ---------------------------------------------------------------------------------------------
# IAM roles for EKS Pod Identity
# ---------------------------------------------------------------------------------------------

data "aws_iam_policy_document" "pod_identity_trust" {
  statement {
    actions = ["sts:AssumeRole", "sts:TagSession"]
    principals {
      type        = "Service"
      identifiers = ["pods.eks.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "runtime" {
  statement {
    sid       = "ReadImagesAndRepository"
    actions   = ["s3:GetObject"]
    resources = [local.images, local.repo]
  }
  statement {
    sid       = "ListImagesAndRepository"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.images_prefix}*", "${var.repository_prefix}*"]
    }
  }
  statement {
    sid       = "DecryptObjects"
    actions   = ["kms:Decrypt"]
    resources = [var.kms_key_arn]
  }
}

data "aws_iam_policy_document" "image_builder" {
  statement {
    sid       = "ReadRepository"
    actions   = ["s3:GetObject"]
    resources = [local.repo]
  }
  statement {
    sid = "WriteImages"
    actions = [
      "s3:GetObject",
      "s3:PutObject",
      "s3:DeleteObject",
      "s3:AbortMultipartUpload",
      "s3:ListMultipartUploadParts",
    ]
    resources = [local.images]
  }
  statement {
    sid       = "ListImagesAndRepository"
    actions   = ["s3:ListBucket", "s3:ListBucketMultipartUploads"]
    resources = [local.bucket]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.images_prefix}*", "${var.repository_prefix}*"]
    }
  }
  statement {
    sid       = "EncryptAndDecryptObjects"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.kms_key_arn]
  }
}

data "aws_iam_policy_document" "activator" {
  statement {
    sid       = "ReadRepository"
    actions   = ["s3:GetObject"]
    resources = [local.repo]
  }
  statement {
    sid       = "ListRepository"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.repository_prefix}*"]
    }
  }
  statement {
    sid       = "DecryptObjects"
    actions   = ["kms:Decrypt"]
    resources = [var.kms_key_arn]
  }
}

resource "aws_iam_role" "thaw" {
  for_each = local.role_suffix

  name                 = "${var.name}-${each.value}"
  description          = "Thaw ${each.value} pods (${var.cluster_name}/${local.sa_namespace[each.key]}/${local.sa[each.key]})"
  assume_role_policy   = data.aws_iam_policy_document.pod_identity_trust.json
  permissions_boundary = var.permissions_boundary_arn
  tags                 = var.tags
}

resource "aws_iam_role_policy" "thaw" {
  for_each = local.role_suffix

  name   = "thaw-${each.value}"
  role   = aws_iam_role.thaw[each.key].id
  policy = local.policies[each.key]
}

resource "aws_eks_pod_identity_association" "thaw" {
  for_each = local.role_suffix

  cluster_name    = var.cluster_name
  namespace       = local.sa_namespace[each.key]
  service_account = local.sa[each.key]
  role_arn        = aws_iam_role.thaw[each.key].arn
  tags            = var.tags
}

# ---------------------------------------------------------------------------------------------
# Kubernetes: namespace, the activator's namespaced rights, the image builder's account
# ---------------------------------------------------------------------------------------------

resource "kubernetes_namespace_v1" "thaw" {
  count = var.create_namespace ? 1 : 0

  metadata {
    name = var.namespace
    labels = {
      "app.kubernetes.io/part-of" = "thaw"
      # privileged: the node cache's hostPath (see the top of this file and docs/kubernetes.md).
      "pod-security.kubernetes.io/enforce"         = "privileged"
      "pod-security.kubernetes.io/enforce-version" = local.pod_security_version
      "pod-security.kubernetes.io/warn"            = "baseline"
      "pod-security.kubernetes.io/warn-version"    = local.pod_security_version
      "pod-security.kubernetes.io/audit"           = "baseline"
      "pod-security.kubernetes.io/audit-version"   = local.pod_security_version
    }
  }
}

resource "kubernetes_namespace_v1" "image_builder" {
  count = var.create_namespace ? 1 : 0

  metadata {
    name = var.image_builder_namespace
    labels = {
      "app.kubernetes.io/part-of"                  = "thaw"
      "pod-security.kubernetes.io/enforce"         = "restricted"
      "pod-security.kubernetes.io/enforce-version" = local.pod_security_version
    }
  }
}

resource "kubernetes_role_v1" "activator" {
  count = var.create_activator_rbac ? 1 : 0

  metadata {
    name      = "thaw-activator"
    namespace = local.ns
  }

  # Exactly the chart's Role (deploy/helm/thaw/templates/rbac.yaml), which is the default owner
  # of these rights (rbac.create); tests/unit/deploy checks both against what the activator uses.
  # Claims warm-pool pods (patch), creates model pods when none is ready, deletes drained ones,
  # watches them all.
  rule {
    api_groups = [""]
    resources  = ["pods"]
    verbs      = ["list", "watch", "create", "patch", "delete"]
  }

  # The warm pool's Deployment: its pod template and size.
  rule {
    api_groups = ["apps"]
    resources  = ["deployments"]
    verbs      = ["get"]
  }

  # The scaling leader's Lease (one activator decides, the others follow) and the fleet's
  # load-state Lease (explicit model control: decision 0024).
  rule {
    api_groups = ["coordination.k8s.io"]
    resources  = ["leases"]
    verbs      = ["get", "create", "update"]
  }
}

resource "kubernetes_role_binding_v1" "activator" {
  count = var.create_activator_rbac ? 1 : 0

  metadata {
    name      = "thaw-activator"
    namespace = local.ns
  }
  role_ref {
    api_group = "rbac.authorization.k8s.io"
    kind      = "Role"
    name      = kubernetes_role_v1.activator[0].metadata[0].name
  }
  subject {
    kind      = "ServiceAccount"
    name      = local.sa.activator
    namespace = local.ns
  }
}

resource "kubernetes_service_account_v1" "image_builder" {
  count = var.create_image_builder_service_account ? 1 : 0

  metadata {
    name      = local.sa.image_builder
    namespace = local.sa_namespace.image_builder
    labels    = { "app.kubernetes.io/part-of" = "thaw" }
  }
  # It talks to S3 only; no Kubernetes API token in its pods.
  automount_service_account_token = false
}
