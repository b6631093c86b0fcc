# Offline: the module has no provider, so `command = plan` evaluates every output.

variables {
  models = [
    { name = "resnet50", gpu = 1, hot = true, min_replicas = 1, target_concurrency = 16 },
    { name = "bert-base_v2.1", instance_type = "m6i.xlarge" },
    { name = "llama-3-8b", gpu = 1, instance_type = "g6e.xlarge", activation_timeout_s = 600 },
    { name = "tiny" },
  ]
}

run "defaults_fill_unset_settings" {
  command = plan

  assert {
    condition = (
      output.endpoints["bert-base_v2.1"].min_replicas == 0
      && output.endpoints["bert-base_v2.1"].max_replicas == 4
      && output.endpoints["bert-base_v2.1"].target_concurrency == 8
      && output.endpoints["bert-base_v2.1"].container_concurrency == 0
      && output.endpoints["bert-base_v2.1"].scale_to_zero_grace_s == 30
      && output.endpoints["bert-base_v2.1"].activation_timeout_s == 300
    )
    error_message = "unset scaling settings must take the module defaults (0, 4, 8, 0, 30, 300)"
  }

  assert {
    condition = (
      output.endpoints["resnet50"].min_replicas == 1
      && output.endpoints["resnet50"].target_concurrency == 16
      && output.endpoints["resnet50"].max_replicas == 4
    )
    error_message = "set scaling settings must win over the defaults"
  }
}

run "caller_defaults_apply" {
  command = plan

  variables {
    defaults = { max_replicas = 10, scale_to_zero_grace_s = 300 }
  }

  assert {
    condition = (
      output.endpoints["bert-base_v2.1"].max_replicas == 10
      && output.endpoints["bert-base_v2.1"].scale_to_zero_grace_s == 300
      && output.endpoints["bert-base_v2.1"].target_concurrency == 8
    )
    error_message = "`defaults` given by the caller must apply to unset fields, the rest keep the built-in defaults"
  }
}

run "chart_entries_use_the_contract_keys" {
  command = plan

  assert {
    condition     = [for m in output.chart_models : m.name] == ["resnet50", "bert-base_v2.1", "llama-3-8b", "tiny"]
    error_message = "chart entries must keep var.models order"
  }

  assert {
    condition = output.chart_models[0] == {
      name                     = "resnet50"
      minReplicas              = 1
      maxReplicas              = 4
      targetConcurrency        = 16
      containerConcurrency     = 0
      scaleToZeroGraceSeconds  = 30
      activationTimeoutSeconds = 300
      gpu                      = 1
      hot                      = true
      placementClass           = "gpu1"
    }
    error_message = "a chart entry must carry exactly the contract's models keys with effective values"
  }

  assert {
    condition     = output.chart_models[1].placementClass == "cpu-m6i-xlarge" && output.chart_models[2].activationTimeoutSeconds == 600
    error_message = "instance_type must reach the chart entry as its placement class"
  }
}

run "gpu_and_instance_type_pick_the_placement_class" {
  command = plan

  assert {
    condition = (
      output.endpoints["resnet50"].placement_class == "gpu1"
      && output.endpoints["llama-3-8b"].placement_class == "gpu1-g6e-xlarge"
      && output.endpoints["bert-base_v2.1"].placement_class == "cpu-m6i-xlarge"
      && output.endpoints["tiny"].placement_class == "default"
    )
    error_message = "a class names what a model's pods need: GPUs and the pinned instance type"
  }

  assert {
    condition = output.placement_classes == {
      default           = { gpu = 0, instance_type = "" }
      gpu1              = { gpu = 1, instance_type = "" }
      "gpu1-g6e-xlarge" = { gpu = 1, instance_type = "g6e.xlarge" }
      "cpu-m6i-xlarge"  = { gpu = 0, instance_type = "m6i.xlarge" }
    }
    error_message = "one class per distinct need, and `default` always"
  }

  assert {
    condition = alltrue([
      for name, e in output.endpoints : (e.gpu == 0) == (output.placement_classes[e.placement_class].gpu == 0)
    ])
    error_message = "a CPU model's class has no GPU and a GPU model's class has GPUs"
  }
}

run "thaw_parameters_are_config_pbtxt_strings" {
  command = plan

  assert {
    condition = output.thaw_parameters["resnet50"] == tomap({
      "thaw.min_replicas"          = "1"
      "thaw.max_replicas"          = "4"
      "thaw.target_concurrency"    = "16"
      "thaw.container_concurrency" = "0"
      "thaw.scale_to_zero_grace_s" = "30"
      "thaw.activation_timeout_s"  = "300"
      "thaw.placement_class"       = "gpu1"
    })
    error_message = "each model's thaw.* parameters must be its effective settings as strings"
  }
}

run "gpu_models_get_the_gpu_selector_and_tolerations" {
  command = plan

  assert {
    condition = (
      output.endpoints["resnet50"].node_selector == tomap({ "nvidia.com/gpu.present" = "true" })
      && jsonencode(output.endpoints["resnet50"].tolerations) == jsonencode([{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }])
    )
    error_message = "a GPU model must select GPU nodes and tolerate their taint"
  }

  assert {
    condition = (
      output.endpoints["bert-base_v2.1"].node_selector == tomap({ "node.kubernetes.io/instance-type" = "m6i.xlarge" })
      && length(output.endpoints["bert-base_v2.1"].tolerations) == 0
    )
    error_message = "a CPU model must not tolerate the GPU taint; its instance type becomes a selector"
  }

  assert {
    condition     = output.hot_models == ["resnet50"] && output.max_gpus_per_replica == 1
    error_message = "hot models and the largest GPU ask must be reported"
  }

  assert {
    condition     = output.endpoints["bert-base_v2.1"].label_value == "bert-base_v2.1"
    error_message = "a valid name is its own label value, unchanged"
  }
}

run "no_models_is_valid" {
  command = plan

  variables {
    models = []
  }

  assert {
    condition     = length(output.chart_models) == 0 && output.max_gpus_per_replica == 0
    error_message = "no models must give an empty models list"
  }
}

run "refuses_a_name_starting_with_underscore" {
  command = plan

  variables {
    models = [{ name = "_private" }]
  }

  expect_failures = [var.models]
}

run "refuses_a_name_ending_with_a_dot" {
  command = plan

  variables {
    models = [{ name = "resnet." }]
  }

  expect_failures = [var.models]
}

run "refuses_a_path_like_name" {
  command = plan

  variables {
    models = [{ name = "../etc" }]
  }

  expect_failures = [var.models]
}

run "refuses_a_name_longer_than_a_label_value" {
  command = plan

  variables {
    models = [{ name = "m${join("", [for i in range(63) : "x"])}" }]
  }

  expect_failures = [var.models]
}

run "accepts_a_63_character_name" {
  command = plan

  variables {
    models = [{ name = "m${join("", [for i in range(62) : "x"])}" }]
  }

  assert {
    condition     = length(output.chart_models[0].name) == 63
    error_message = "63 characters is the longest label value and must be accepted"
  }
}

run "refuses_duplicate_names" {
  command = plan

  variables {
    models = [{ name = "resnet50" }, { name = "resnet50", gpu = 1 }]
  }

  expect_failures = [var.models]
}

run "refuses_fractional_gpus" {
  command = plan

  variables {
    models = [{ name = "resnet50", gpu = 0.5 }]
  }

  expect_failures = [var.models]
}

run "refuses_too_many_gpus" {
  command = plan

  variables {
    models = [{ name = "resnet50", gpu = 9 }]
  }

  expect_failures = [var.models]
}

run "refuses_an_image_uri_rather_than_dropping_it" {
  command = plan

  variables {
    models = [{ name = "resnet50", image_uri = "s3://thaw-images/resnet50/" }]
  }

  expect_failures = [var.models]
}

run "refuses_a_malformed_instance_type" {
  command = plan

  variables {
    models = [{ name = "resnet50", instance_type = "big GPU" }]
  }

  expect_failures = [var.models]
}

run "refuses_out_of_range_scaling" {
  command = plan

  variables {
    models = [{ name = "resnet50", max_replicas = 0 }]
  }

  expect_failures = [var.models]
}

run "refuses_zero_target_concurrency" {
  command = plan

  variables {
    models = [{ name = "resnet50", target_concurrency = 0 }]
  }

  expect_failures = [var.models]
}

run "refuses_out_of_range_defaults" {
  command = plan

  variables {
    defaults = { min_replicas = 5, max_replicas = 2 }
  }

  expect_failures = [var.defaults]
}

run "refuses_min_above_max_after_defaults" {
  command = plan

  variables {
    models = [{ name = "resnet50", min_replicas = 6 }]
  }

  expect_failures = [output.endpoints]
}

run "refuses_a_gpu_model_on_a_type_the_gpu_group_lacks" {
  command = plan

  variables {
    gpu_instance_types = ["g6.xlarge"]
    models             = [{ name = "llama", gpu = 1, instance_type = "p5.48xlarge" }]
  }

  expect_failures = [output.endpoints]
}

run "refuses_a_cpu_model_on_a_type_the_cpu_group_lacks" {
  command = plan

  variables {
    cpu_instance_types = ["m6i.large"]
    models             = [{ name = "bert", instance_type = "c7i.large" }]
  }

  expect_failures = [output.endpoints]
}

run "accepts_a_gpu_model_on_a_gpu_group_type" {
  command = plan

  variables {
    gpu_instance_types = ["g6.xlarge", "g6.12xlarge"]
    models             = [{ name = "llama", gpu = 4, instance_type = "g6.12xlarge" }]
  }

  assert {
    condition     = output.endpoints["llama"].node_selector["node.kubernetes.io/instance-type"] == "g6.12xlarge"
    error_message = "an instance type the GPU group has must be accepted and selected"
  }
}
