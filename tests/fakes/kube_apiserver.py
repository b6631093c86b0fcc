"""A fake Kubernetes API server for tests and benchmarks: the real wire protocol on 127.0.0.1,
so kubernetes-asyncio (or any client) is used unchanged against it.

`FakeKubeApiServer` runs the aiohttp app (`kube_http`) and the control-plane loops
(`kube_controllers`) on its own thread and event loop, so a test may block (a subprocess wait,
a sync client) without stalling the server. The test-side hooks (faults, RBAC rules, compaction,
ending watches, reading objects) are thread-safe. See KUBERNETES.md for what is supported.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tests.fakes.kube_authz import Authorizer, PolicyRule
from tests.fakes.kube_controllers import Controllers
from tests.fakes.kube_faults import Faults
from tests.fakes.kube_http import ApiState, RecordedRequest, build_app
from tests.fakes.kube_resources import BUILTIN_TYPES, ResourceType
from tests.fakes.kube_scheduler import FakeNode, Scheduler
from tests.fakes.kube_store import Store
from tests.fakes.kube_watch import WatchOptions

if TYPE_CHECKING:
    from kubernetes_asyncio.client import Configuration

__all__ = ["FakeApiServerConfig", "FakeKubeApiServer"]


@dataclass(frozen=True)
class FakeApiServerConfig:
    """How the fake behaves. `history_size` bounds the watch history (older resourceVersions
    get 410); `max_watch_s` ends a watch that set no `timeoutSeconds` (the real server picks
    30-60 min); `token` is the bearer token every request must carry (None: no auth)."""

    history_size: int = 1000
    bookmark_interval_s: float = 5.0
    max_watch_s: float = 1800.0
    token: str | None = "thaw-fake-token"
    user: str = "system:serviceaccount:thaw:activator"
    custom_resources: tuple[ResourceType, ...] = ()
    controllers: bool = True
    # The server binds pods itself (kube_scheduler) to the nodes a test adds with
    # `add_node`; run the kubelets with `schedule=False` then. Off: each kubelet binds.
    scheduler: bool = False
    start_timeout_s: float = 10.0


class FakeKubeApiServer:
    """The server; `with FakeKubeApiServer() as server:` or `start()` / `stop()`."""

    def __init__(self, config: FakeApiServerConfig | None = None) -> None:
        self.config = config or FakeApiServerConfig()
        self.store = Store(history_size=self.config.history_size)
        self.faults = Faults()
        self.authorizer = Authorizer(self.config.user)
        self.types = {t.key: t for t in (*BUILTIN_TYPES, *self.config.custom_resources)}
        self._plural = {t.plural: t for t in self.types.values()}
        self._state = ApiState(
            store=self.store,
            types=self.types,
            faults=self.faults,
            authorizer=self.authorizer,
            watch_options=WatchOptions(self.config.bookmark_interval_s, self.config.max_watch_s),
            token=self.config.token,
        )
        self.scheduler = Scheduler(self.store, bugs=self._state.internal_errors)
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started: Future[str] = Future()
        self._stop: asyncio.Event | None = None

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeKubeApiServer:
        """Listen on 127.0.0.1 (a free port); returns once requests are accepted."""
        self._thread = threading.Thread(target=self._run, name="fake-kube-apiserver", daemon=True)
        self._thread.start()
        self.url = self._started.result(self.config.start_timeout_s)
        return self

    def stop(self) -> None:
        """End every watch, stop the controllers and the listener, join the thread."""
        if self._loop is not None and self._stop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(15)
        self._thread = None

    def __enter__(self) -> FakeKubeApiServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:
            if not self._started.done():
                self._started.set_exception(exc)
            raise
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        runner = web.AppRunner(
            build_app(self._state), handler_cancellation=True, access_log=None, shutdown_timeout=1.0
        )
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        controllers = None
        if self.config.controllers:
            controllers = asyncio.create_task(
                Controllers(self.store, self.types, bugs=self._state.internal_errors).run()
            )
        scheduler = asyncio.create_task(self.scheduler.run()) if self.config.scheduler else None
        self._started.set_result(f"http://{host}:{port}")
        try:
            await self._stop.wait()
        finally:
            self._state.hub.end_all()
            if scheduler is not None:
                scheduler.cancel()
                await asyncio.gather(scheduler, return_exceptions=True)
            if controllers is not None:
                controllers.cancel()
                await asyncio.gather(controllers, return_exceptions=True)
            await runner.cleanup()

    def _on_loop(self, action: Any) -> Any:
        """Run `action()` on the server's loop and return its result (from another thread)."""
        if self._loop is None:
            raise RuntimeError("the fake API server is not running")

        async def call() -> Any:
            return action()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(10)

    # --- test hooks ------------------------------------------------------------------------

    def add_node(
        self, name: str, *, labels: Mapping[str, str] | None = None, max_pods: int = 110
    ) -> None:
        """A node joins the cluster (`scheduler=True`): Pending pods that fit it are bound."""
        node = FakeNode(name, dict(labels or {}), max_pods)
        self._on_loop(lambda: self.scheduler.add_node(node))

    def remove_node(self, name: str) -> None:
        """A node leaves the scheduler's choice (its bound pods stay as they are)."""
        self._on_loop(lambda: self.scheduler.remove_node(name))

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every resource request so far, in arrival order."""
        return list(self._state.requests)

    @property
    def internal_errors(self) -> list[str]:
        """Bugs in the fake itself (answered as 500); the fixtures fail a test that saw any."""
        return list(self._state.internal_errors)

    def end_watches(self) -> int:
        """End every open watch stream now, cleanly; returns how many were open."""
        return int(self._on_loop(self._state.hub.end_all))

    def open_watches(self) -> int:
        return int(self._on_loop(lambda: self._state.hub.open_count))

    def compact(self) -> None:
        """Forget the watch history now: watches from older resourceVersions get 410."""
        self.store.compact()

    def set_rbac(self, rules: Sequence[PolicyRule] | None) -> None:
        """Allow only what `rules` allow (403 otherwise, and SelfSubjectAccessReviews answer
        from them); None allows everything again."""
        self.authorizer.set_rules(rules)

    def resource(self, plural: str) -> ResourceType:
        try:
            return self._plural[plural]
        except KeyError:
            raise KeyError(f"the fake API server serves no resource {plural!r}") from None

    def get(self, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """A stored object (a copy), or None."""
        return self.store.find(self.resource(plural), namespace, name)

    def objects(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Copies of the stored objects, sorted by (namespace, name)."""
        return self.store.objects(self.resource(plural), namespace)[0]

    # --- client configuration --------------------------------------------------------------

    def client_configuration(self) -> Configuration:
        """A kubernetes-asyncio `Configuration` for this server (no kubeconfig needed)."""
        from kubernetes_asyncio.client import Configuration

        if self.config.token is None:
            return Configuration(host=self.url)
        return Configuration(
            host=self.url,
            api_key={"BearerToken": self.config.token},
            api_key_prefix={"BearerToken": "Bearer"},
        )

    def write_kubeconfig(self, path: Path, *, namespace: str = "default") -> Path:
        """Write a kubeconfig whose current context points at this server (token auth)."""
        user: dict[str, Any] = {"token": self.config.token} if self.config.token else {}
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "thaw-fake", "cluster": {"server": self.url}}],
            "users": [{"name": "thaw-fake", "user": user}],
            "contexts": [
                {
                    "name": "thaw-fake",
                    "context": {
                        "cluster": "thaw-fake",
                        "user": "thaw-fake",
                        "namespace": namespace,
                    },
                }
            ],
            "current-context": "thaw-fake",
        }
        path.write_text(json.dumps(kubeconfig, indent=2))  # JSON is YAML
        return path
