"""Fixtures for the infra/terraform tests: the terraform CLI, offline, with scratch data dirs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.terraform_tree import TerraformCli

NO_TERRAFORM = "no `terraform` binary on PATH; install Terraform >= 1.6 to run this check"


@pytest.fixture
def terraform(tmp_path: Path) -> TerraformCli:
    """The terraform CLI with its working data in this test's tmp dir; skips without a binary."""
    cli = TerraformCli.find(tmp_path / "tf-data")
    if cli is None:
        pytest.skip(NO_TERRAFORM)
    return cli


@pytest.fixture(scope="module")
def module_terraform(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str], TerraformCli]:
    """A terraform CLI per label, shared by a test module (one `init` for many renders)."""
    made: dict[str, TerraformCli] = {}

    def get(label: str) -> TerraformCli:
        if label not in made:
            cli = TerraformCli.find(tmp_path_factory.mktemp(f"tf-{label}"))
            if cli is None:
                pytest.skip(NO_TERRAFORM)
            made[label] = cli
        return made[label]

    return get
