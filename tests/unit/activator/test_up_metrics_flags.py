"""tritonserver's `--allow-cpu-metrics` / `--allow-gpu-metrics` on `thaw up` and `thaw serve`:
parsed as tritonserver's booleans, kept in the metrics settings replicas are given, refused
(when false) with the Kubernetes scaler, whose pods' flags are the chart's."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from activator.config import ActivatorConfig
from activator.errors import ConfigError
from activator.process import cli as up_cli
from runtime.process import cli as serve_cli


def _up(*argv: str) -> ActivatorConfig:
    parser = argparse.ArgumentParser()
    up_cli.register(parser.add_subparsers())
    return up_cli.build_config(parser.parse_args(["up", *argv]))


def test_up_keeps_both_flags_and_gives_them_to_replicas(tmp_path: Path) -> None:
    assert _up(str(tmp_path)).metrics_settings.to_args() == ()
    settings = _up(str(tmp_path), "--allow-cpu-metrics=false", "--allow-gpu-metrics=0")
    assert settings.metrics_settings.to_args() == (
        "--allow-cpu-metrics=false",
        "--allow-gpu-metrics=false",
    )


def test_serve_reads_them_as_tritonserver_does(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    args = parser.parse_args(["serve", str(tmp_path), "--allow-gpu-metrics", "false"])
    settings = serve_cli.build_config(args).metrics_settings
    assert (settings.cpu_gauges, settings.gpu_gauges) == (True, False)


def test_false_is_refused_with_the_kubernetes_scaler(tmp_path: Path) -> None:
    kube = ("--scaler", "kubernetes", "--kubeconfig", "/k")
    with pytest.raises(ConfigError, match="--allow-cpu/gpu-metrics=false reach replicas"):
        _up(str(tmp_path), *kube, "--allow-gpu-metrics=false")
    _up(str(tmp_path), *kube, "--allow-gpu-metrics=true")  # the default: nothing to refuse
