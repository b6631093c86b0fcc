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

run "one_warm_pool_per_placement_class" {
  command = plan

  variables {
    models = [
      { name = "resnet50", gpu = 2, hot = true },
      { name = "bert", min_replicas = 1 },
      { name = "llama", gpu = 1, instance_type = "g6e.xlarge" },
    ]
    node_class_selectors = { cpu = { "thaw.dev/node-class" = "cpu" }, gpu = { "thaw.dev/node-class" = "gpu" } }
  }

  assert {
    condition     = keys(output.values.runtime.pools) == ["default", "gpu1-g6e-xlarge", "gpu2"]
    error_message = "one pool per distinct need, plus default"
  }

  assert {
    condition = (
      output.values.runtime.pools.gpu2.gpu == 2
      && jsonencode(output.values.runtime.pools.gpu2.tolerations) == jsonencode([{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }])
      && output.values.runtime.pools.gpu2.nodeSelector == tomap({ "nvidia.com/gpu.present" = "true", "thaw.dev/node-class" = "gpu" })
    )
    error_message = "a GPU pool asks its GPUs, selects GPU nodes and tolerates their taint"
  }

  assert {
    condition     = output.values.runtime.pools["gpu1-g6e-xlarge"].nodeSelector["node.kubernetes.io/instance-type"] == "g6e.xlarge"
    error_message = "a pinned model's class selects its instance type"
  }

  assert {
    condition = (
      output.values.runtime.pools.default.gpu == 0
      && length(output.values.runtime.pools.default.tolerations) == 0
      && output.values.runtime.pools.default.nodeSelector == tomap({ "thaw.dev/node-class" = "cpu" })
    )
    error_message = "the default pool is CPU-only, on CPU nodes, and tolerates no GPU taint"
  }

  assert {
    condition = (
      output.values.runtime.pools.default.replicas == 1
      && output.values.runtime.pools.gpu2.replicas == 0
      && output.values.runtime.pools["gpu1-g6e-xlarge"].replicas == 0
    )
    error_message = "GPU classes keep no idle warm pod unless asked (a warm GPU pod is a GPU-hour per hour)"
  }

  assert {
    condition = alltrue([
      for m in output.values.models : (m.gpu == 0) == (output.values.runtime.pools[m.placementClass].gpu == 0)
      && m.gpu <= output.values.runtime.pools[m.placementClass].gpu
    ])
    error_message = "every model's class exists and fits it; a CPU model never names a GPU pool"
  }
}

run "warm_gpu_pods_are_a_choice" {
  command = plan

  variables {
    runtime = { gpu_pool_replicas = 1, class_pool_replicas = { default = 3 } }
  }

  assert {
    condition     = output.values.runtime.pools.gpu2.replicas == 1 && output.values.runtime.pools.default.replicas == 3
    error_message = "gpu_pool_replicas and class_pool_replicas set the warm pods per class"
  }
}

run "the_cache_budget_reaches_the_chart" {
  command = plan

  variables {
    node_cache = { max_bytes = 500000000000 }
  }

  assert {
    condition     = output.values.nodeCache.maxBytes == 500000000000
    error_message = "node_cache.max_bytes becomes nodeCache.maxBytes (thaw serve --cache-max-bytes)"
  }
}

run "values_carry_the_inputs" {
  command = plan

  variables {
    image      = { tag = "1.2.3", registry = "123456789012.dkr.ecr.us-east-1.amazonaws.com", pull_secrets = ["ecr"] }
    image_gpu  = { tag = "1.2.3", digest = "sha256:${join("", [for i in range(64) : "a"])}" }
    node_cache = { host_path = "/mnt/nvme-cache", max_bytes = 500000000000 }
    activator  = { replicas = 3 }
  }

  assert {
    condition = (
      output.values.image.tag == "1.2.3" && output.values.imageGpu.tag == "1.2.3"
      && output.values.image.registry == "123456789012.dkr.ecr.us-east-1.amazonaws.com"
      && output.values.image.repository == "thaw-serve/thaw" && output.values.image.pullSecrets == tolist(["ecr"])
      && output.values.imageGpu.repository == "thaw-serve/thaw-cuda" && startswith(output.values.imageGpu.digest, "sha256:aaaa")
    )
    error_message = "registry, repository, tag, digest and pull secrets reach both images"
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

run "refuses_a_negative_warm_pool" {
  command = plan

  variables {
    runtime = { class_pool_replicas = { gpu2 = -1 } }
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

run "refuses_a_malformed_digest" {
  command = plan

  variables {
    image_gpu = { digest = "latest" }
  }

  expect_failures = [var.image_gpu]
}
