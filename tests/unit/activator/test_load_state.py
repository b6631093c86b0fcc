"""Triton's load state through `thaw up` (activator.fleet.load_state): explicit mode's stories."""

from __future__ import annotations

import pytest

from activator.errors import ModelUnavailable, UnknownModel
from activator.fleet.load_state import LoadState, LoadStates


def test_untracked_every_model_is_loaded_and_stays_so() -> None:
    states = LoadStates(tracked=False)
    states.mark_unloaded("m")
    assert states.state("m") is LoadState.LOADED
    assert states.refusal("m") is None
    assert not states.tracked


def test_explicit_mode_model_not_named_at_start_is_not_loaded() -> None:
    states = LoadStates(tracked=True, at_start=["a"])
    assert states.loaded("a")
    assert states.state("b") is LoadState.NOT_LOADED
    refusal = states.refusal("b")
    assert isinstance(refusal, ModelUnavailable)
    assert refusal.status == 503
    assert refusal.message == "model 'b' is not ready"


def test_star_at_start_loads_every_model() -> None:
    states = LoadStates(tracked=True, at_start=["*"])
    assert states.loaded("anything")


def test_unload_refuses_with_tritons_not_found_until_loaded_again() -> None:
    states = LoadStates(tracked=True, at_start=["*"])
    states.mark_unloaded("m")
    refusal = states.refusal("m")
    assert isinstance(refusal, UnknownModel)
    assert refusal.status == 404
    assert refusal.message == "Request for unknown model: 'm' has no available versions"
    assert states.loaded("other")  # `*` still holds for the others
    states.mark_loaded("m")
    assert states.refusal("m") is None


def test_loading_an_ensemble_loads_its_steps() -> None:
    states = LoadStates(tracked=True)
    states.mark_loaded("ens", "step_a", "step_b")
    assert all(states.loaded(n) for n in ("ens", "step_a", "step_b"))
    states.mark_unloaded("ens")  # unloading the ensemble leaves its steps loaded (Triton)
    assert states.loaded("step_a") and not states.loaded("ens")


@pytest.mark.parametrize("name", ["m", "with space", "ünï"])
def test_refusal_words_match_thaw_serve(name: str) -> None:
    from thawwire.model_control import no_available_versions, not_ready

    states = LoadStates(tracked=True)
    assert states.refusal(name).message == not_ready(name)  # type: ignore[union-attr]
    states.mark_unloaded(name)
    assert states.refusal(name).message == no_available_versions(name)  # type: ignore[union-attr]


def test_down_with_a_step_is_unloaded_until_loaded_again_and_keeps_its_name() -> None:
    states = LoadStates(tracked=True, at_start=["ens"])
    assert states.named("ens") and not states.named("step")
    states.mark_unloaded("ens", with_a_step=True)
    assert isinstance(states.refusal("ens"), UnknownModel)  # as an unloaded model
    assert states.down_with_a_step() == {"ens"} and states.named("ens")
    states.mark_loaded("ens")
    assert states.loaded("ens") and not states.down_with_a_step()
    states.mark_unloaded("ens", with_a_step=True)
    states.mark_unloaded("ens")  # unloaded by name while down: it no longer comes back
    assert not states.down_with_a_step() and not states.named("ens")
    assert LoadStates(tracked=True, at_start=["*"]).named("anything")
