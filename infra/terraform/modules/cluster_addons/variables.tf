variable "network_policy" {
  description = "Enforce NetworkPolicies: vpc-cni's network-policy agent (`enableNetworkPolicy`). Off leaves the chart's NetworkPolicies unenforced."
  type        = bool
  default     = true
}

variable "policy_event_logs" {
  description = "Log every NetworkPolicy accept/deny decision of the node agent (verbose; for debugging a policy)."
  type        = bool
  default     = false
}
