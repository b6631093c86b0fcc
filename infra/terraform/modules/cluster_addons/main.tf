# The EKS add-ons of the cluster, as the terraform-aws-modules/eks v21 `addons` map, with their
# configuration. vpc-cni runs its network-policy agent (`enableNetworkPolicy`), without which the
# chart's NetworkPolicies are stored but not enforced: the runtime's load/unload API and the
# activators' peer-report port would be open to every pod in the cluster.

locals {
  vpc_cni_configuration = {
    enableNetworkPolicy = var.network_policy ? "true" : "false"
    nodeAgent = {
      enablePolicyEventLogs = var.policy_event_logs ? "true" : "false"
    }
  }

  addons = {
    coredns    = {}
    kube-proxy = {}
    # Before any node: nodes that join without the CNI never become Ready.
    vpc-cni = {
      before_compute       = true
      configuration_values = jsonencode(local.vpc_cni_configuration)
    }
    # Hands the IAM roles of the identity module (and Karpenter's) to pods; must run before pods start.
    eks-pod-identity-agent = { before_compute = true }
  }
}
