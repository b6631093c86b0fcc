"""Discovery endpoints of the fake API server: `/version`, `/api`, `/apis`, the per-group
resource lists, and the health checks, each also under its trailing-slash spelling (which the
generated client uses)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web

from tests.fakes.kube_resources import ResourceType

__all__ = ["SERVER_VERSION", "discovery_routes"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SERVER_VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-thaw-fake",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-08-13T00:00:00Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def discovery_routes(types: Iterable[ResourceType]) -> list[web.RouteDef]:
    by_version: dict[tuple[str, str], list[ResourceType]] = {}
    for rtype in types:
        by_version.setdefault((rtype.group, rtype.version), []).append(rtype)

    def resource_list(group_version: str, members: list[ResourceType]) -> dict[str, Any]:
        resources = []
        for r in members:
            resources.append(
                {
                    "name": r.plural,
                    "singularName": r.kind.lower(),
                    "kind": r.kind,
                    "namespaced": r.namespaced,
                    "verbs": list(r.verbs),
                }
            )
            for sub in sorted(r.subresources):
                sub_kind = {"scale": "Scale", "binding": "Binding"}.get(sub, r.kind)
                resources.append(
                    {
                        "name": f"{r.plural}/{sub}",
                        "singularName": "",
                        "kind": sub_kind,
                        "namespaced": r.namespaced,
                        "verbs": ["create"] if sub == "binding" else ["get", "patch", "update"],
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": resources,
        }

    groups = sorted({g for g, _ in by_version if g})
    group_list = {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": g,
                "versions": [
                    {"groupVersion": f"{g}/{v}", "version": v}
                    for gg, v in sorted(by_version)
                    if gg == g
                ],
                "preferredVersion": next(
                    {"groupVersion": f"{g}/{v}", "version": v}
                    for gg, v in sorted(by_version)
                    if gg == g
                ),
            }
            for g in groups
        ],
    }

    def constant(body: dict[str, Any]) -> Handler:
        async def answer(_: web.Request) -> web.Response:
            return web.json_response(body)

        return answer

    async def healthy(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    answers: dict[str, Handler] = {
        "/version": constant(SERVER_VERSION),
        "/api": constant(
            {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        ),
        "/apis": constant(group_list),
        **{path: healthy for path in ("/healthz", "/livez", "/readyz")},
    }
    for (group, version), members in by_version.items():
        group_version = f"{group}/{version}" if group else version
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        answers[path] = constant(resource_list(group_version, members))
    # The generated client asks for `/version/`, `/apis/`, `/api/v1/`: serve both spellings.
    table = [
        web.get(path + slash, answer) for path, answer in answers.items() for slash in ("", "/")
    ]
    return table
