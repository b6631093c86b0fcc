"""`thaw up --python-spare-stubs` / `--python-spare-stub-imports`: with `--scaler kubernetes`
refused before anything connects, naming the chart values (the pods' command line is the chart's
pool template); with `--scaler local`, not given, 1 only for a repository holding a Python model
(`spare_stubs_for`), and given, as given."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from activator.process import cli
from activator.process.local_cli import auto_spare_imports, local_config, spare_stubs_for
from tests.fixtures.models import make_add_sub
from thawwire.runtime_parameters import spare_stub_imports


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
    ("given", "backends", "spares"),
    [
        (None, {"python", ""}, 1),
        (None, {"onnxruntime", ""}, 0),
        (None, set(), 0),
        ("0", {"python"}, 0),
        ("3", {"onnxruntime"}, 3),
    ],
)
def test_the_default_follows_the_repository_and_a_given_number_stands(
    tmp_path: Path, given: str | None, backends: set[str], spares: int
) -> None:
    flags = ["--python-spare-stubs", given] if given is not None else []
    args = _up(tmp_path / "repo", *flags, "--python-spare-stub-imports", "torch, transformers")
    local = spare_stubs_for(local_config(args), args.python_spare_stubs, backends)
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
    local = spare_stubs_for(local_config(args), args.python_spare_stubs, {"python"}, found)
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
