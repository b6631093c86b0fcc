# Offline: no provider, so `command = plan` evaluates every output.

run "network_policies_are_enforced_by_default" {
  command = plan

  assert {
    condition     = jsondecode(output.addons["vpc-cni"].configuration_values).enableNetworkPolicy == "true"
    error_message = "vpc-cni must run its network-policy agent, or NetworkPolicies are not enforced"
  }

  assert {
    condition     = output.addons["vpc-cni"].before_compute && output.addons["eks-pod-identity-agent"].before_compute
    error_message = "the CNI and the Pod Identity agent must exist before the first node"
  }

  assert {
    condition     = jsondecode(output.addons["vpc-cni"].configuration_values) == output.vpc_cni_configuration
    error_message = "the rendered configuration is the documented one"
  }
}

run "can_be_turned_off" {
  command = plan

  variables {
    network_policy = false
  }

  assert {
    condition     = jsondecode(output.addons["vpc-cni"].configuration_values).enableNetworkPolicy == "false"
    error_message = "network_policy = false turns the agent off"
  }
}
