"""An ensemble's steps and their data flow, checked Triton's way (platform `ensemble`).

An ensemble is no model of its own: `ensemble_scheduling.step` lists the models it runs, each
step's `input_map` (the step model's input -> an ensemble tensor) and `output_map` (the step
model's output -> an ensemble tensor). Ensemble tensors are the ensemble's inputs, its outputs
and every name in the maps; a step runs once every tensor it reads exists. The checks and
their texts are Triton's (core `ValidateEnsembleSchedulingConfig`), plus a named cycle where
Triton only says that a tensor "is not connected".
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tritonconfig.errors import ModelConfigError
from tritonconfig.schema import mc

__all__ = [
    "ENSEMBLE_PLATFORM",
    "EnsembleStep",
    "UnloadPlan",
    "back_with_steps",
    "composing_models",
    "ensemble_steps",
    "is_ensemble",
    "needed_steps",
    "unload_plan",
    "validate_ensemble",
]

ENSEMBLE_PLATFORM = "ensemble"


@dataclass(frozen=True)
class EnsembleStep:
    """One step: run `model_name` (version `model_version`, -1: its latest) with its inputs
    read from ensemble tensors (`input_map`: model input -> tensor) and its outputs written to
    ensemble tensors (`output_map`: model output -> tensor)."""

    index: int
    model_name: str
    model_version: int
    input_map: dict[str, str]
    output_map: dict[str, str]

    @property
    def reads(self) -> frozenset[str]:
        """The ensemble tensors this step needs before it can run."""
        return frozenset(self.input_map.values())

    @property
    def writes(self) -> frozenset[str]:
        return frozenset(self.output_map.values())


def needed_steps(
    steps: Sequence[EnsembleStep], outputs: Iterable[str], requested: Iterable[str]
) -> list[EnsembleStep]:
    """The steps a request for the ensemble outputs `requested` (none: all of `outputs`) runs,
    as Triton prunes them: a step none of whose outputs is needed is left out, an output being
    needed when it is requested or read by a step that runs. A step output nothing reads and
    no ensemble output names keeps its step, as in Triton."""
    wanted = set(requested)
    if not wanted:
        return list(steps)
    kept = list(steps)
    ignored = set(outputs) - wanted - {t for s in kept for t in s.reads}
    while True:
        pruned = [s for s in kept if s.output_map and s.writes <= ignored]
        if not pruned:
            return kept
        kept = [s for s in kept if s not in pruned]
        read = {t for s in kept for t in s.reads}
        ignored |= {t for s in pruned for t in s.reads} - read - wanted


def is_ensemble(config: mc.ModelConfig) -> bool:
    return config.platform == ENSEMBLE_PLATFORM


def ensemble_steps(config: mc.ModelConfig) -> list[EnsembleStep]:
    """The steps of an ensemble config, in config order."""
    return [
        EnsembleStep(
            index=index,
            model_name=step.model_name,
            model_version=step.model_version,
            input_map=dict(step.input_map),
            output_map=dict(step.output_map),
        )
        for index, step in enumerate(config.ensemble_scheduling.step)
    ]


def composing_models(config: mc.ModelConfig) -> list[str]:
    """The models an ensemble runs, each once, in step order ([] for any other model)."""
    if not is_ensemble(config):
        return []
    return list(dict.fromkeys(step.model_name for step in config.ensemble_scheduling.step))


def ensemble_cycle(name: str, steps_of: Callable[[str], list[str]]) -> list[str]:
    """The models along a path of ensemble steps from `name` back to itself, or [].

    `steps_of(model)` is the models `model` runs ([] for a model that is no ensemble, or whose
    config cannot be read): `thaw serve` reads configs from disk, `thaw up` from its scan."""
    seen: set[str] = set()

    def walk(model: str, chain: list[str]) -> list[str]:
        for dep in steps_of(model):
            if dep == name:
                return [*chain, dep]
            if dep not in seen:
                seen.add(dep)
                found = walk(dep, [*chain, dep])
                if found:
                    return found
        return []

    return walk(name, [name])


@dataclass(frozen=True)
class UnloadPlan:
    """What an unload of one model does to the others (`unload_plan`)."""

    removed: frozenset[Any]  # unloaded as its dependents: gone until loaded again
    down: frozenset[Any]  # ensembles down with a step: back once it is (`back_with_steps`)


def unload_plan(
    target: Hashable,
    graph: Mapping[Any, Collection[Any]],
    *,
    unload_dependents: bool,
    named: Collection[Any] = (),
) -> UnloadPlan:
    """What an unload of `target` takes down with it, as Triton 2.51's dependency graph does
    (its model repository manager; observed side by side). `graph` maps each ensemble that is
    loaded, or down with a step, to the models its steps run. With `unload_dependents`, a
    model a removed ensemble runs is removed too once no ensemble left in the graph runs it
    and it was not loaded by name (`named`), in turn. Every ensemble in the graph that runs a
    removed model, directly or through other ensembles, is down with a step: it stays in the
    graph and comes back with it (`back_with_steps`)."""
    removed = {target}
    pending = [target]
    while unload_dependents and pending:
        for step in graph.get(pending.pop(), ()):
            if step in removed or step in named:
                continue
            if not any(step in steps for e, steps in graph.items() if e not in removed):
                removed.add(step)
                pending.append(step)
    down: set[Any] = set()
    changed = True
    while changed:
        changed = False
        for ensemble, steps in graph.items():
            if ensemble in removed or ensemble in down:
                continue
            if any(step in removed or step in down for step in steps):
                down.add(ensemble)
                changed = True
    return UnloadPlan(frozenset(removed - {target}), frozenset(down))


def back_with_steps(up: Collection[Any], down: Mapping[Any, Collection[Any]]) -> list[Any]:
    """The ensembles that come back now, as Triton 2.51 brings them back (observed side by
    side): `down` maps each ensemble an unload took down with one of its steps (not one
    unloaded by name, nor as a dependent) to the models its steps ran; one comes back once
    every one of them is up (`up`: the models loaded now), ensembles of ensembles in turn.
    In the order they can load."""
    loaded = set(up)
    back: list[Any] = []
    changed = True
    while changed:
        changed = False
        for ensemble, steps in down.items():
            if ensemble not in loaded and all(step in loaded for step in steps):
                loaded.add(ensemble)
                back.append(ensemble)
                changed = True
    return back


def cycle_error(cycle: list[str]) -> str:
    """The message for a cycle `ensemble_cycle` found, the same from both servers."""
    return f"circular dependency between ensembles: {cycle[0]} -> ... -> {cycle[-2]} -> {cycle[-1]}"


def validate_ensemble(config: mc.ModelConfig, source: str) -> None:
    """ModelConfigError for the first thing Triton refuses in an ensemble's config (or in the
    `ensemble_scheduling` of a model that is no ensemble)."""
    name = config.name
    has_steps = config.HasField("ensemble_scheduling")
    if not is_ensemble(config):
        if has_steps:
            raise ModelConfigError(
                f"{source}: ensemble scheduling cannot be set for model '{name}' whose platform "
                f"is not {ENSEMBLE_PLATFORM}"
            )
        return
    if not has_steps:
        raise ModelConfigError(
            f"{source}: ensemble scheduling must be set for ensemble {name} whose platform is "
            f"{ENSEMBLE_PLATFORM}"
        )
    if len(config.instance_group):
        raise ModelConfigError(
            f"{source}: instance group should not be specified for ensemble '{name}'"
        )
    if config.HasField("optimization"):
        raise ModelConfigError(
            f"{source}: optimization should not be specified for ensemble '{name}'"
        )
    if len(config.model_warmup):
        raise ModelConfigError(f"{source}: model_warmup can not be specified for ensemble '{name}'")
    steps = ensemble_steps(config)
    if not steps:
        raise ModelConfigError(f"{source}: must specify 'step' for ensemble '{name}'")
    _check_steps(steps, name, source)
    _check_flow(config, steps, source)


def _check_steps(steps: list[EnsembleStep], name: str, source: str) -> None:
    written: set[str] = set()
    for step in steps:
        where = f"step {step.index} of ensemble '{name}'"
        if not step.model_name:
            raise ModelConfigError(f"{source}: must specify 'model_name' in {where}")
        if step.model_name == name:
            raise ModelConfigError(f"{source}: ensemble '{name}' runs itself in step {step.index}")
        if not step.input_map:
            raise ModelConfigError(f"{source}: must specify 'input_map' in {where}")
        if not step.output_map:
            raise ModelConfigError(f"{source}: must specify 'output_map' in {where}")
        for tensor in step.output_map.values():
            if tensor in written or list(step.output_map.values()).count(tensor) > 1:
                raise ModelConfigError(
                    f"{source}: ensemble tensor '{tensor}' can appear in an output map only once "
                    f"for ensemble '{name}' step {step.index}"
                )
            written.add(tensor)


def _check_flow(config: mc.ModelConfig, steps: list[EnsembleStep], source: str) -> None:
    """Every output written from the inputs, every tensor used (Triton's ready-set walk)."""
    name = config.name
    inputs = [io.name for io in config.input]
    outputs = [io.name for io in config.output]
    tensors = {t for step in steps for t in step.reads | step.writes}
    for tensor in inputs:
        if tensor not in tensors:
            raise ModelConfigError(
                f"{source}: ensemble input '{tensor}' for ensemble {name}' is not used"
            )
    ready = set(inputs)
    pending = list(steps)
    progressed = True
    while progressed:
        progressed = False
        for step in list(pending):
            if step.reads <= ready:
                ready |= step.writes
                pending.remove(step)
                progressed = True
    for tensor in outputs:
        if tensor not in tensors:
            raise ModelConfigError(
                f"{source}: ensemble output '{tensor}' for ensemble {name}' is not used"
            )
        if tensor not in ready:
            raise ModelConfigError(f"{source}: {_not_written(tensor, name, steps, ready)}")
    read = {t for step in steps for t in step.reads}
    for tensor in sorted(tensors - set(outputs)):
        if tensor not in ready or tensor not in read:
            raise ModelConfigError(
                f"{source}: ensemble tensor '{tensor}' is unused in ensemble '{name}'"
            )


def _not_written(output: str, name: str, steps: list[EnsembleStep], ready: set[str]) -> str:
    """Triton's text for an output no step can produce, naming a cycle when there is one."""
    message = f"output '{output}' for ensemble '{name}' is not written"
    writer = {t: s for s in steps for t in s.writes}
    # Walk back from the output through the first missing input of each writing step.
    chain: list[EnsembleStep] = []
    tensor = output
    while tensor in writer and writer[tensor] not in chain:
        step = writer[tensor]
        chain.append(step)
        missing = sorted(step.reads - ready)
        if not missing:
            break
        tensor = missing[0]
    if tensor != output:
        message += f": at least one of its depending tensors, '{tensor}', is not connected"
    if tensor in writer and writer[tensor] in chain:
        loop = chain[chain.index(writer[tensor]) :]
        names = " -> ".join(f"step {s.index} ('{s.model_name}')" for s in reversed(loop))
        message += f"; its steps form a cycle: {names} -> step {loop[-1].index}"
    return message
