"""`runtime.extraArgs` and a pool's own `extraArgs`: more `thaw serve` flags for the runtime
pods (tritonserver's device and backend flags, which `thaw up --scaler kubernetes` cannot hand
to pods it does not template), after the chart's own, every pool's first, and read by
`thaw serve` as given."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tests.unit.deploy.chart_paths import CHART, Render, as_mounted, runtime_args

VALUES: dict[str, Any] = yaml.safe_load((CHART / "examples" / "gpu-karpenter.yaml").read_text())


def test_extra_args_reach_every_pool_and_a_pools_own_reach_it_alone(render: Render) -> None:
    from runtime.process.cli import build_config
    from thaw.cli import build_parser

    values = copy.deepcopy(VALUES)
    values["runtime"]["extraArgs"] = [
        "--backend-config=python,shm-default-byte-size=16777216", "--model-load-thread-count=2",
    ]  # fmt: skip
    gpu_class = next(name for name, pool in values["runtime"]["pools"].items() if pool.get("gpu"))
    values["runtime"]["pools"][gpu_class]["extraArgs"] = [
        "--cuda-memory-pool-byte-size=0:268435456", "--min-supported-compute-capability=7.5",
    ]  # fmt: skip
    pools = runtime_args(render(values))
    assert len(pools) > 1
    for name, args in pools.items():
        every = args[-4:-2] if name == gpu_class else args[-2:]
        assert every == values["runtime"]["extraArgs"], name
        config = build_config(build_parser("serve").parse_args(as_mounted(args)))
        assert config.model_load_threads == 2, name
        assert ("python", "shm-default-byte-size", "16777216") in config.backend_config, name
        if name == gpu_class:
            assert args[-2:] == values["runtime"]["pools"][gpu_class]["extraArgs"]
            assert config.cuda_memory_pools == ((0, 268435456),)
            assert config.min_compute_capability == 7.5
        else:
            assert config.cuda_memory_pools == () and config.min_compute_capability == 6.0


def test_without_extra_args_the_pods_args_are_the_charts(render: Render) -> None:
    for args in runtime_args(render(VALUES)).values():
        assert not [a for a in args if a.startswith(("--backend-config", "--cuda-memory-pool"))]


def test_the_schema_refuses_extra_args_that_are_not_a_list_of_strings(render: Render) -> None:
    for bad in ({"runtime": {"extraArgs": "--model-load-thread-count=2"}},
                {"runtime": {"extraArgs": [{"flag": "x"}]}},
                {"runtime": {"pools": {"default": {"extraArgs": [2]}}}}):  # fmt: skip
        values = copy.deepcopy(VALUES)
        for key, value in bad["runtime"].items():
            if key == "pools":
                values["runtime"]["pools"]["default"].update(value["default"])
            else:
                values["runtime"][key] = value
        done = render(values, check=False)
        assert done.returncode != 0, bad
        assert "values don't meet the specifications of the schema" in done.stderr, bad
