"""Which model a name means in several repositories (runtime.models.namespaces): stories over
two repositories on disk, no server."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.errors import InvalidInput, ModelNotFound, RepositoryError
from runtime.models.namespaces import ModelKey, Namespaces

AMBIGUITY = "There are 2 identifiers of model 'm' in global map"


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    for root, names in ((a, ("m", "only_a", "ens")), (b, ("m", "ens"))):
        for name in names:
            (root / name).mkdir(parents=True)
    return a, b


def test_without_namespacing_every_repository_is_one_namespace(roots: tuple[Path, Path]) -> None:
    ns = Namespaces(roots, enabled=False)
    assert ns.scan() == [ModelKey("", "ens"), ModelKey("", "m"), ModelKey("", "only_a")]
    assert ns.keys_on_disk("m") == [ModelKey("", "m")]  # read_model refuses it, not this
    assert ns.serving_key("m", {ModelKey("", "m"): True}.get) == ModelKey("", "m")


def test_a_name_one_namespace_has_resolves_and_one_two_have_is_refused(
    roots: tuple[Path, Path],
) -> None:
    a, b = (str(r) for r in roots)
    ns = Namespaces(roots, enabled=True)
    assert ns.keys_on_disk("m") == [ModelKey(a, "m"), ModelKey(b, "m")]
    assert ModelKey(a, "only_a") in ns.scan() and ModelKey(b, "only_a") not in ns.scan()
    live = {ModelKey(a, "m"): True, ModelKey(b, "m"): True, ModelKey(a, "only_a"): True}
    assert ns.serving_key("only_a", live.get) == ModelKey(a, "only_a")
    with pytest.raises(InvalidInput, match=AMBIGUITY):
        ns.serving_key("m", live.get)
    assert ns.serving_key("nope", live.get) is None  # the caller looks at the disk
    with pytest.raises(InvalidInput, match=AMBIGUITY):
        ns.on_disk_key("m", ns.keys_on_disk("m"))
    with pytest.raises(ModelNotFound):
        ns.on_disk_key("nope", ns.keys_on_disk("nope"))


def test_an_ensembles_step_prefers_its_namespace_then_the_one_live_model(
    roots: tuple[Path, Path],
) -> None:
    a, b = (str(r) for r in roots)
    ns = Namespaces(roots, enabled=True)
    both = {ModelKey(a, "m"): True, ModelKey(b, "m"): True}
    assert ns.serving_key("m", both.get, home=b) == ModelKey(b, "m")
    # a's `m` unloaded (removed from its repository): a's ensemble runs b's, as Triton's does.
    gone = {ModelKey(a, "m"): False, ModelKey(b, "m"): True}
    assert ns.serving_key("m", gone.get, home=a) == ModelKey(b, "m")
    assert ns.serving_key("m", gone.get) == ModelKey(b, "m")


def test_the_model_an_ensembles_step_loads(roots: tuple[Path, Path]) -> None:
    a_root, b_root = roots
    a, b = str(a_root), str(b_root)
    ns = Namespaces(roots, enabled=True)
    assert ns.step_key(ModelKey(b, "ens"), "m") == ModelKey(b, "m")
    assert ns.step_key(ModelKey(b, "ens"), "only_a") == ModelKey(a, "only_a")
    (a_root / "m").rename(a_root / "moved")
    assert ns.step_key(ModelKey(a, "ens"), "m") == ModelKey(b, "m")
    with pytest.raises(RepositoryError, match="'nope' which is not in the model repository"):
        ns.step_key(ModelKey(a, "ens"), "nope")
    (b_root / "x").mkdir()
    (a_root / "x").mkdir()
    with pytest.raises(RepositoryError, match="There are 2 identifiers of model 'x'"):
        ns.step_key(ModelKey("/elsewhere", "ens3"), "x")
