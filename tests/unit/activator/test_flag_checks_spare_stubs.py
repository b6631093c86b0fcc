"""`thaw up --python-spare-stubs` / `--python-spare-stub-imports`: with `--scaler kubernetes`
refused before anything connects, naming the chart values (the pods' command line is the chart's
pool template); with `--scaler local`, not given, as many as the Python model with the most stub
instances starts (`stub_instances`, `spare_stubs_for`), 0 without one, and given, as given; the
imports `auto` unless given."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from google.protobuf import text_format

from activator.process import cli
from activator.process.local_cli import (
    auto_spare_imports,
    local_config,
    spare_stubs_for,
)
from tests.fixtures.models import make_add_sub
from thawserver.stub_instances import stub_instances
from thawwire.runtime_parameters import spare_stub_imports
from tritonconfig.schema import mc


def _up(repo: Path, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["up", str(repo), *argv])


@pytest.mark.parametrize(
    "flags", [["--python-spare-stubs", "0"], ["--python-spare-stub-imports", "torch"]]
)
def test_on_kubernetes_the_flags_are_refused_naming_the_chart_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    make_add_sub(tmp_path / "repo", "add_sub")
    args = _up(tmp_path / "repo", "--scaler", "kubernetes", "--kubeconfig", "/k", *flags)
    assert args.func(args) == 2  # before anything connects to the API
    assert (
        "--python-spare-stubs / --python-spare-stub-imports reach replicas with --scaler local "
        "only: on Kubernetes the runtime pods' flags are the Helm chart's; set its values "
        "runtime.pythonSpareStubs / runtime.pythonSpareStubImports instead"
    ) in capsys.readouterr().err


@pytest.mark.parametrize(
    ("given", "instances", "spares"),
    [
        (None, 1, 1),
        (None, 3, 3),  # a Python model with three instances: its whole load takes spares
        (None, 20, 8),  # at most PYTHON_SPARE_STUBS_MAX
        (None, 0, 0),  # no Python model
        ("0", 2, 0),
        ("3", 0, 3),
    ],
)
def test_the_default_follows_the_repository_and_a_given_number_stands(
    tmp_path: Path, given: str | None, instances: int, spares: int
) -> None:
    flags = ["--python-spare-stubs", given] if given is not None else []
    args = _up(tmp_path / "repo", *flags, "--python-spare-stub-imports", "torch, transformers")
    local = spare_stubs_for(local_config(args), args.python_spare_stubs, instances)
    assert local.python_spare_stubs == spares
    assert local.python_spare_stub_imports == ("torch", "transformers")


@pytest.mark.parametrize(
    ("flags", "found", "imports"),
    [
        ([], ("torch",), ("torch",)),  # not given: auto, what thaw up found
        (["--python-spare-stub-imports", " auto "], ("torch",), ("torch",)),
        (["--python-spare-stub-imports", ""], None, ()),  # given empty: none
        (["--python-spare-stub-imports", "scipy"], None, ("scipy",)),
    ],
)
def test_the_imports_are_thaw_ups_to_find_unless_given(
    tmp_path: Path, flags: list[str], found: tuple[str, ...] | None, imports: tuple[str, ...]
) -> None:
    args = _up(tmp_path / "repo", *flags)
    assert auto_spare_imports(args) == (found is not None)
    local = spare_stubs_for(local_config(args), args.python_spare_stubs, 1, found)
    assert (local.python_spare_stubs, local.python_spare_stub_imports) == (1, imports)


def test_on_kubernetes_an_empty_list_given_is_refused_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_add_sub(tmp_path / "repo", "add_sub")
    args = _up(tmp_path / "repo", "--scaler", "kubernetes", "--kubeconfig", "/k",
               "--python-spare-stub-imports", "")  # fmt: skip
    assert args.func(args) == 2
    assert "runtime.pythonSpareStubImports" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("torch,auto", "'auto' stands alone, or name the modules"),
        ("torch, ../x", "'../x' is not a Python module name"),
    ],
)
def test_a_list_names_modules(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        spare_stub_imports("--python-spare-stub-imports", text)
    assert spare_stub_imports("--python-spare-stub-imports", " torch , ") == ("torch",)


def _config(text: str) -> mc.ModelConfig:
    config = mc.ModelConfig()
    text_format.Parse(text, config)
    return config


@pytest.mark.parametrize(
    ("configs", "most"),
    [
        (['backend: "python"'], 1),  # no instance group: one instance
        (['backend: "python" instance_group [{count: 2 kind: KIND_CPU}]'], 2),
        (['backend: "python" instance_group [{count: 2 kind: KIND_CPU}, {count: 1}]'], 3),
        (['backend: "python" instance_group [{count: 2 kind: KIND_GPU gpus: [0, 1]}]'], 4),
        (['backend: "python" instance_group [{count: 3}]', 'backend: "python"'], 3),
        (['backend: "onnxruntime" instance_group [{count: 4}]'], 0),
        # Instances in the replica, or under their own interpreter: no stub takes a spare.
        (
            [
                'backend: "python" instance_group [{count: 2}] '
                'parameters {key: "thaw.python_runtime" value {string_value: "in_process"}}'
            ],
            0,
        ),
        (
            [
                'backend: "python" instance_group [{count: 2}] '
                'parameters {key: "EXECUTION_ENV_PATH" value {string_value: "e.tar.gz"}}'
            ],
            0,
        ),
        ([], 0),
    ],
)
def test_the_default_is_the_most_stubs_one_python_model_starts(
    configs: list[str], most: int
) -> None:
    assert stub_instances(_config(text) for text in configs) == most
