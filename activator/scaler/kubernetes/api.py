"""The Kubernetes API as the backend uses it: a few calls on kubernetes-asyncio, errors translated.

Every call goes through kubernetes-asyncio's generated APIs unchanged, with
`_preload_content=False` so bodies stay plain JSON dicts (no generated models: a watch event
costs one parse) and so an HTTP error is read here, once, into `KubeApiError` (status, reason,
the server's message, its Retry-After). The watch is kubernetes-asyncio's `Watch` over a list
function whose docstring names no return type, which makes it yield raw dicts; its ERROR
events (410 Gone) arrive as `KubeApiError(410)` too. `with_retries` retries what
`backoff.retryable` allows within a deadline. Who may do what is asked with
SelfSubjectAccessReviews (`missing_access`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeVar

import aiohttp

from activator.errors import ScalerUnavailable
from activator.scaler.kube_config import KubernetesConfig
from activator.scaler.kubernetes.backoff import Backoff, retryable

__all__ = [
    "REQUIRED_ACCESS",
    "KubeApi",
    "KubeApiError",
    "open_api_client",
    "with_retries",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")
_MERGE_PATCH = "application/merge-patch+json"
_MAX_MESSAGE = 500

# Every (API group, resource, verb) the backend uses, in Thaw's own namespace only; the Helm
# chart's Role grants exactly these (tests/unit/deploy compares them). Leases: the scaling
# leader's and the fleet's load state (explicit mode: load_state_lease), the same verbs.
REQUIRED_ACCESS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("", "pods", ("list", "watch", "create", "patch", "delete")),
    ("apps", "deployments", ("get",)),
    ("coordination.k8s.io", "leases", ("get", "create", "update")),
)


class KubeApiError(Exception):
    """An API call failed: `status` is the HTTP status (0: no answer), `reason` the Status
    reason (Conflict, NotFound, Forbidden, Expired, ...), `retry_after_s` the server's ask."""

    def __init__(self, status: int, reason: str, message: str, *, retry_after_s: float = 0.0):
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after_s = retry_after_s


async def open_api_client(kube: KubernetesConfig) -> Any:
    """A kubernetes-asyncio `ApiClient` from the pod's service account (`in_cluster`) or a
    kubeconfig file; the files are read in a thread (the loop never blocks on them)."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    try:
        if kube.in_cluster:
            await asyncio.to_thread(
                config.load_incluster_config, client_configuration=configuration
            )
        else:
            await asyncio.to_thread(_load_kubeconfig, configuration, kube)
    except (config.ConfigException, OSError, ValueError) as exc:
        where, hint = (
            ("in-cluster service account", "outside a pod: --in-cluster off and --kubeconfig FILE")
            if kube.in_cluster
            else ("kubeconfig", "give --kubeconfig FILE, or --in-cluster on inside a pod")
        )
        raise KubeApiError(0, "NoConfig", f"cannot load the {where}: {exc} ({hint})") from exc
    return client.ApiClient(configuration)


def _load_kubeconfig(configuration: Any, kube: KubernetesConfig) -> None:
    from kubernetes_asyncio import config

    path = str(kube.kubeconfig) if kube.kubeconfig is not None else None
    asyncio.run(
        config.load_kube_config(
            config_file=path,
            context=kube.kube_context,
            client_configuration=configuration,
            persist_config=False,
        )
    )


class KubeApi:
    """The calls the backend makes, in one namespace; bodies and answers are dicts."""

    def __init__(self, api_client: Any, namespace: str, *, timeout_s: float) -> None:
        from kubernetes_asyncio import client

        self.namespace = namespace
        self._timeout_s = timeout_s
        # Typed Any: bodies are plain JSON dicts (the client serializes them as they are),
        # which its stubs, written for the generated models, do not allow.
        self._core: Any = client.CoreV1Api(api_client)
        self._apps: Any = client.AppsV1Api(api_client)
        self._coordination: Any = client.CoordinationV1Api(api_client)
        self._authorization: Any = client.AuthorizationV1Api(api_client)

    # ---- pods ---------------------------------------------------------------------------

    async def list_pods(self, selector: str) -> tuple[list[dict[str, Any]], str]:
        """The pods matching `selector` and the list's resourceVersion (to watch from)."""
        answer = await self._json(
            "list pods",
            self._core.list_namespaced_pod(self.namespace, label_selector=selector, **self._opts()),
        )
        return list(answer.get("items") or []), str(answer["metadata"]["resourceVersion"])

    async def watch_pods(
        self, selector: str, resource_version: str, *, timeout_s: int
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """(event type, pod) from `resource_version` on, until the server ends the watch after
        `timeout_s`. 410 Gone (history too old) and other failures raise `KubeApiError`."""
        from kubernetes_asyncio.client import ApiException
        from kubernetes_asyncio.watch import Watch

        async def list_pods(**kwargs: Any) -> Any:
            """The namespace's pods (no return type named here: Watch yields raw dicts)."""
            return await self._core.list_namespaced_pod(self.namespace, **kwargs)

        try:
            async with Watch() as watch:
                stream = watch.stream(
                    list_pods,
                    label_selector=selector,
                    resource_version=resource_version,
                    timeout_seconds=timeout_s,
                    allow_watch_bookmarks=True,
                    # A silent connection ends too; the server's own end comes first.
                    _request_timeout=aiohttp.ClientTimeout(sock_read=timeout_s + 30),
                )
                async for event in stream:
                    yield str(event["type"]), event["raw_object"]
        except ApiException as exc:
            reason = str(exc.reason or "")
            raise KubeApiError(exc.status or 0, reason, f"watch pods: {reason}") from exc
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise KubeApiError(0, "Unreachable", f"watch pods: {_describe(exc)}") from exc

    async def patch_pod(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch; 409 when it carries a stale `metadata.resourceVersion`."""
        return await self._json(
            f"patch pod {name}",
            self._core.patch_namespaced_pod(
                name, self.namespace, patch, _content_type=_MERGE_PATCH, **self._opts()
            ),
        )

    async def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        return await self._json(
            "create pod", self._core.create_namespaced_pod(self.namespace, pod, **self._opts())
        )

    async def delete_pod(self, name: str, *, grace_s: int) -> None:
        """Delete gracefully (SIGTERM, then SIGKILL after `grace_s`); a pod already gone is
        not an error."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": grace_s}
        await self._json(
            f"delete pod {name}",
            self._core.delete_namespaced_pod(name, self.namespace, body=body, **self._opts()),
            missing_ok=True,
        )

    # ---- the pool Deployment, Leases, access reviews ------------------------------------

    async def read_deployment(self, name: str) -> dict[str, Any]:
        return await self._json(
            f"read deployment {name}",
            self._apps.read_namespaced_deployment(name, self.namespace, **self._opts()),
        )

    async def read_lease(self, name: str) -> dict[str, Any] | None:
        """The Lease, or None when there is none."""
        return await self._json(
            f"read lease {name}",
            self._coordination.read_namespaced_lease(name, self.namespace, **self._opts()),
            missing_ok=True,
        )

    async def create_lease(self, lease: dict[str, Any]) -> dict[str, Any]:
        return await self._json(
            "create lease",
            self._coordination.create_namespaced_lease(self.namespace, lease, **self._opts()),
        )

    async def replace_lease(self, name: str, lease: dict[str, Any]) -> dict[str, Any]:
        """PUT; 409 when `lease` carries a stale resourceVersion (someone else wrote it)."""
        return await self._json(
            f"update lease {name}",
            self._coordination.replace_namespaced_lease(
                name, self.namespace, lease, **self._opts()
            ),
        )

    async def missing_access(
        self, required: Iterable[tuple[str, str, tuple[str, ...]]] = REQUIRED_ACCESS
    ) -> list[str]:
        """`verb group/resource` for every required right this identity lacks here, asked
        with SelfSubjectAccessReviews (which every authenticated identity may create)."""
        asks = [(g, r, v) for g, r, verbs in required for v in verbs]
        answers = await asyncio.gather(*(self._allowed(g, r, v) for g, r, v in asks))
        denied = [ask for ask, ok in zip(asks, answers, strict=True) if not ok]
        return [f"{v} {g + '/' if g else ''}{r}" for g, r, v in denied]

    async def require_access(self) -> None:
        """ScalerUnavailable naming the rights of REQUIRED_ACCESS this identity lacks here;
        an API server that cannot review them (an error status) is logged and let be, one that
        cannot be reached raises its KubeApiError."""
        try:
            missing = await self.missing_access()
        except KubeApiError as exc:
            if exc.status == 0:
                raise
            logger.warning("cannot review this activator's rights (%s); going on", exc.message)
            return
        if missing:
            raise ScalerUnavailable(
                f"kubernetes scaler: forbidden: this activator may not {', '.join(missing)} "
                f"in namespace {self.namespace!r}; grant the chart's Role "
                "(deploy/helm/thaw, rbac.create) to its service account"
            )

    async def _allowed(self, group: str, resource: str, verb: str) -> bool:
        attributes = {"namespace": self.namespace, "verb": verb, "group": group}
        attributes["resource"] = resource
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        answer = await self._json(
            "access review",
            self._authorization.create_self_subject_access_review(review, **self._opts()),
        )
        return bool((answer.get("status") or {}).get("allowed"))

    # ---- one place where answers are read -----------------------------------------------

    def _opts(self) -> dict[str, Any]:
        return {"_preload_content": False, "_request_timeout": self._timeout_s}

    async def _json(self, what: str, call: Awaitable[Any], *, missing_ok: bool = False) -> Any:
        from kubernetes_asyncio.client import ApiException

        try:
            response = await call
            try:
                body = await response.read()
            finally:
                response.release()
        except ApiException as exc:  # refused before sending (a body it cannot serialize)
            raise KubeApiError(exc.status or 0, str(exc.reason), f"{what}: {exc.reason}") from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise KubeApiError(0, "Unreachable", f"{what}: {_describe(exc)}") from exc
        status = response.status
        if 200 <= status < 300:
            return json.loads(body) if body else {}
        if status == 404 and missing_ok:
            return None
        raise _api_error(what, status, body, response.headers.get("Retry-After"))


def _api_error(what: str, status: int, body: bytes, retry_after: str | None) -> KubeApiError:
    """A `v1.Status` answer (or any body) as a KubeApiError."""
    reason, message, after = "", body.decode("utf-8", "replace")[:_MAX_MESSAGE], 0.0
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        reason = str(data.get("reason") or "")
        message = str(data.get("message") or message)[:_MAX_MESSAGE]
        details = data.get("details") or {}
        if isinstance(details, dict) and isinstance(details.get("retryAfterSeconds"), int):
            after = float(details["retryAfterSeconds"])
    if retry_after is not None and retry_after.strip().isdigit():
        after = max(after, float(retry_after))
    return KubeApiError(
        status, reason, f"{what}: {status} {reason}: {message}", retry_after_s=after
    )


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


async def with_retries(
    op: Callable[[], Awaitable[T]],
    *,
    backoff: Backoff,
    rng: random.Random,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
    on_retry: Callable[[KubeApiError], None] | None = None,
) -> T:
    """`op()`, tried again after each retryable KubeApiError (back-off, Retry-After) while
    the next try would start before `deadline`; the last error is raised."""
    attempt = 0
    while True:
        try:
            return await op()
        except KubeApiError as exc:
            attempt += 1
            delay = backoff.delay(attempt, rng, retry_after_s=exc.retry_after_s)
            if not retryable(exc.status) or clock() + delay >= deadline:
                raise
            if on_retry is not None:
                on_retry(exc)
            await asyncio.sleep(delay)
