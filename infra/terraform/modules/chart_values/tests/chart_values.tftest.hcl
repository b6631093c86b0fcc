# Offline: the module and its submodules have no provider, so `command = plan` evaluates it all.

variables {
  model_repository = { source = "s3", s3_uri = "s3://thaw-images-test/repository/" }
  images_store_uri = "s3://thaw-images-test/images/"
  images_region    = "eu-west-1"
  models = [
    { name = "resnet50", gpu = 2, hot = true },
    { name = "bert", min_replicas = 1 },
  ]
}

run "gpu_models_turn_on_gpu_warm_pods_sized_for_the_largest" {
  command = plan

  assert {
    condition     = output.values.runtime.gpu.enabled && output.values.runtime.gpu.count == 2
    error_message = "a model with gpu = 2 must enable GPU warm pods with 2 GPUs each"
  }

  assert {
    condition = (
      jsonencode(output.values.runtime.gpu.tolerations) == jsonencode([{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }])
      && jsonencode(output.values.runtime.gpu.nodeSelector) == jsonencode({ "nvidia.com/gpu.present" = "true" })
    )
    error_message = "GPU warm pods must select GPU nodes and tolerate the nvidia.com/gpu:NoSchedule taint"
  }
}

run "cpu_only_models_keep_gpu_off" {
  command = plan

  variables {
    models = [{ name = "bert" }]
  }

  assert {
    condition     = !output.values.runtime.gpu.enabled && output.values.runtime.gpu.count == 1
    error_message = "without GPU models the warm pool must stay on CPU (count stays at the contract's 1)"
  }
}

run "explicit_gpu_settings_win" {
  command = plan

  variables {
    runtime = { gpu_enabled = false, gpu_count = 4 }
  }

  assert {
    condition     = !output.values.runtime.gpu.enabled && output.values.runtime.gpu.count == 4
    error_message = "runtime.gpu_enabled / gpu_count given by the caller must override the derived ones"
  }
}

run "values_carry_the_inputs" {
  command = plan

  variables {
    image      = { tag = "1.2.3" }
    node_cache = { host_path = "/mnt/nvme-cache", max_bytes = 500000000000 }
    activator  = { replicas = 3 }
  }

  assert {
    condition = (
      output.values.image.tag == "1.2.3" && output.values.imageGpu.tag == "1.2.3"
      && output.values.image.repository == "ghcr.io/thaw-serve/thaw"
      && output.values.imageGpu.repository == "ghcr.io/thaw-serve/thaw-cuda"
    )
    error_message = "one tag for both images; the contract's repositories by default"
  }

  assert {
    condition     = output.values.nodeCache.hostPath == "/mnt/nvme-cache" && output.values.nodeCache.maxBytes == 500000000000
    error_message = "the node cache path and bound must reach the values"
  }

  assert {
    condition = (
      output.values.images.storeUri == "s3://thaw-images-test/images/" && output.values.images.region == "eu-west-1"
      && output.values.modelRepository.source == "s3" && output.values.modelRepository.s3Uri == "s3://thaw-images-test/repository/"
    )
    error_message = "the image store and model repository must reach the values"
  }

  assert {
    condition     = output.values.activator.replicas == 3 && output.values.serviceAccount.name == "thaw" && output.values.runtime.serviceAccountName == "thaw-runtime"
    error_message = "activator replicas and the contract's service account names must reach the values"
  }

  assert {
    condition     = [for m in output.values.models : m.name] == ["resnet50", "bert"] && output.values.models[1].minReplicas == 1
    error_message = "one chart models entry per model, in order, with its settings"
  }

  assert {
    condition     = output.thaw_parameters["bert"]["thaw.min_replicas"] == "1"
    error_message = "the thaw.* parameters must be passed through"
  }

  assert {
    condition     = strcontains(output.values_yaml, "\"storeUri\": \"s3://thaw-images-test/images/\"")
    error_message = "values_yaml must be the YAML of the values"
  }
}

run "refuses_an_unknown_pull_policy" {
  command = plan

  variables {
    image = { pull_policy = "Sometimes" }
  }

  expect_failures = [var.image]
}

run "refuses_a_single_activator" {
  command = plan

  variables {
    activator = { replicas = 1 }
  }

  expect_failures = [var.activator]
}

run "refuses_a_repository_source_without_its_field" {
  command = plan

  variables {
    model_repository = { source = "pvc" }
  }

  expect_failures = [var.model_repository]
}

run "refuses_an_unknown_repository_source" {
  command = plan

  variables {
    model_repository = { source = "git", s3_uri = "s3://thaw-images-test/repository/" }
  }

  expect_failures = [var.model_repository]
}

run "refuses_a_non_s3_image_store" {
  command = plan

  variables {
    images_store_uri = "/var/lib/thaw/images"
  }

  expect_failures = [var.images_store_uri]
}

run "refuses_a_malformed_region" {
  command = plan

  variables {
    images_region = "Ireland"
  }

  expect_failures = [var.images_region]
}

run "refuses_too_many_warm_pod_gpus" {
  command = plan

  variables {
    runtime = { gpu_count = 9 }
  }

  expect_failures = [var.runtime]
}

run "refuses_a_negative_cache_bound" {
  command = plan

  variables {
    node_cache = { max_bytes = -1 }
  }

  expect_failures = [var.node_cache]
}

run "refuses_an_uppercase_service_account" {
  command = plan

  variables {
    service_account = { name = "Thaw" }
  }

  expect_failures = [var.service_account]
}
