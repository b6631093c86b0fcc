"""Model namespacing (tritonserver's `--model-namespacing`): which model a name means when
several model repositories hold it.

With namespacing each model repository is a namespace, and the same model name may be in
several. A `ModelKey` names one model: its namespace (the repository's path, as Triton's) and
its name; without namespacing every repository is the one namespace "" (a name held twice is
then no model at all: runtime.models.repository refuses it).

    a client's name      resolves when one namespace has it live (loaded, or to be loaded);
                         several: refused with Triton's "... to resolve ambiguity." (400)
    an ensemble's step   its own namespace's model when that is live, else as a client's name
    an explicit load     of a name loads it in every namespace that holds it (Triton applies a
                         load to all models of that name)

The decisions (`serving_key`) are pure over what the caller knows; the disk reads
(`keys_on_disk`, `scan`, `step_key`) block, so callers run them in a thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

from runtime.errors import InvalidInput, ModelNotFound, RepositoryError
from runtime.inference import InferRequest, InferResponse
from runtime.models.repository import Repositories, list_models
from thawwire.model_control import ambiguous
from thawwire.names import unknown_model

__all__ = ["ModelKey", "Namespaces", "ScopedSteps", "ambiguity_error"]


class ModelKey(NamedTuple):
    """One model: its namespace ("" without namespacing) and its name. A tuple: every request
    looks one up, and a tuple's hash is the cheapest."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}::{self.name}" if self.namespace else self.name


def ambiguity_error(name: str, count: int) -> InvalidInput:
    """Triton's answer to a name `count` namespaces hold (its INVALID_ARG: 400)."""
    return InvalidInput(ambiguous(name, count))


class Namespaces:
    """The namespaces of one server's model repositories, and how names resolve in them."""

    def __init__(self, roots: Sequence[Path], *, enabled: bool) -> None:
        self.enabled = enabled
        self.repositories = Repositories(roots)
        self.names = self._names()

    def _names(self) -> tuple[str, ...]:
        """The namespaces in the order the repositories were given, then registered ("" alone
        without namespacing)."""
        return tuple(str(root) for root in self.repositories.roots) if self.enabled else ("",)

    def register(self, root: Path, mapping: Mapping[str, str]) -> None:
        """A repository registered at run time: a namespace of its own under namespacing
        (runtime.models.repository.Repositories.register; RepositoryConflict)."""
        self.repositories.register(root, mapping)
        self.names = self._names()

    def unregister(self, root: Path) -> None:
        """A registered repository no longer served (RepositoryError when it is not)."""
        self.repositories.unregister(root)
        self.names = self._names()

    def key(self, name: str, namespace: str = "") -> ModelKey:
        """`name` in `namespace` (without namespacing, always the one namespace "")."""
        return ModelKey(namespace if self.enabled else "", name)

    def repository(self, key: ModelKey) -> Path | Repositories:
        """Where `key`'s model is read from (runtime.models.repository.read_model)."""
        if key.namespace:
            return self.repositories.scope(Path(key.namespace))
        return self.repositories

    def model_dir(self, key: ModelKey) -> Path:
        return self.repository(key) / key.name

    # -- on disk (blocking) -----------------------------------------------------------------

    def keys_on_disk(self, name: str) -> list[ModelKey]:
        """The models called `name` the repositories hold: one per namespace that has it."""
        if not self.enabled:
            return [ModelKey("", name)] if self.repositories.holders(name) else []
        return [ModelKey(str(root), name) for root in self.repositories.holders(name)]

    def scan(self) -> list[ModelKey]:
        """Every model in the repositories (RepositoryError when one cannot be read)."""
        if not self.enabled:
            return [ModelKey("", name) for name in list_models(self.repositories)]
        repositories = self.repositories
        return sorted(
            ModelKey(str(root), name)
            for root in repositories.roots
            for name in repositories.names_in(root)
        )

    def step_key(self, home: ModelKey, name: str) -> ModelKey:
        """The model an ensemble in `home`'s namespace loads for its step `name`: its own
        namespace's when there is one, else the only one; RepositoryError otherwise."""
        own = ModelKey(home.namespace, name)
        if self.model_dir(own).is_dir():
            return own
        found = self.keys_on_disk(name)
        if len(found) == 1:
            return found[0]
        if not found:
            raise RepositoryError(
                f"ensemble '{home.name}' depends on '{name}' which is not in the model repository"
            )
        raise RepositoryError(
            f"ensemble '{home.name}' depends on '{name}': {ambiguity_error(name, len(found))}"
        )

    # -- serving (pure) ---------------------------------------------------------------------

    def serving_key(
        self, name: str, live: Callable[[ModelKey], bool | None], *, home: str | None = None
    ) -> ModelKey | None:
        """The model a request for `name` goes to, among those the caller knows.

        `live(key)`: True for a model loaded or to be loaded, False for one known but not
        (unloaded, failed), None for one not known. `home`: the namespace of the ensemble
        whose step asks. None: no model of that name is known (the caller looks at the disk).
        InvalidInput (Triton's ambiguity) when several are live, or none is and several known.
        """
        if not self.enabled:
            key = ModelKey("", name)
            return key if live(key) is not None else None
        if home is not None and live(ModelKey(home, name)):
            return ModelKey(home, name)
        known = {key: state for ns in self.names if (state := live(key := ModelKey(ns, name)))
                 is not None}  # fmt: skip
        alive = [key for key, state in known.items() if state]
        pick = alive or list(known)
        if len(pick) > 1:
            raise ambiguity_error(name, len(pick))
        return pick[0] if pick else None

    def on_disk_key(self, name: str, found: list[ModelKey]) -> ModelKey:
        """The one key of `found` (`keys_on_disk(name)`); ModelNotFound for none, Triton's
        ambiguity for several."""
        if not found:
            raise ModelNotFound(unknown_model(name))
        if len(found) > 1:
            raise ambiguity_error(name, len(found))
        return found[0]


class NamespacedRunner(Protocol):
    """Runs a request on the model a name means from `namespace` (the ModelManager)."""

    async def infer(
        self, request: InferRequest, *, namespace: str | None = None
    ) -> InferResponse: ...

    def stream(
        self, request: InferRequest, *, namespace: str | None = None
    ) -> AsyncIterator[InferResponse]: ...


class ScopedSteps:
    """An ensemble's StepRunner (runtime.scheduling.ensemble_scheduler) under namespacing:
    its steps' names resolve in the ensemble's namespace first, at each request, so a step
    follows its model as that is removed from or comes back to the namespace."""

    def __init__(self, runner: NamespacedRunner, namespace: str) -> None:
        self._runner = runner
        self._namespace = namespace

    async def infer(self, request: InferRequest) -> InferResponse:
        return await self._runner.infer(request, namespace=self._namespace)

    def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        return self._runner.stream(request, namespace=self._namespace)
