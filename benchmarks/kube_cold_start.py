"""The Kubernetes scaler backend against the local one, on the fake API server + real local pods.

    python benchmarks/kube_cold_start.py [--rounds 5] [--burst 200] [--lease-s 2] [--json OUT]
                                         [--cold-only]

Three measurements, in one run, on this machine:

1. Cold start of the same model (an ONNX model whose image is in the node cache) at zero
   replicas through `thaw up --scaler local` (warm pool of 1) and through two `thaw up --scaler
   kubernetes` activators (warm-pool Deployment of 2 pods on the test kubelet), the request
   sent to the scaling leader and to the follower (as a Service sends half of them): first
   request -> 200. Rounds alternate between the three, each after scaling the model to zero
   (`POST /thaw/models/M/scale-to-zero`) and waiting for both pools to be full again; each
   Kubernetes start's time is split by the API server's log (to the leader's claim, claim to
   the first byte).
   Goal: Kubernetes within 50 ms of local (median), printed with the difference and the
   ratio.
2. Lease hand-over: two activators; the leader is killed (SIGKILL), then stopped gracefully
   (SIGTERM: it releases the Lease): seconds until another holds it. Goal: within the lease
   duration after a kill; at once after a release.
3. A burst from zero: --burst concurrent requests split over two activators: how many are lost
   (not 200), wall time and latency percentiles. Goal: 0 lost.

The API server is in-process (tests/fakes), so API latency is loopback; a real cluster adds its
own round trips to the claim (one PATCH) and none to the probe-based readiness.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubernetes_asyncio import client  # noqa: E402

from tests.fakes.kube_apiserver import FakeApiServerConfig, FakeKubeApiServer  # noqa: E402
from tests.fakes.kubelet import KubeletConfig, LocalKubelet  # noqa: E402
from tests.fixtures.kube_fleet import (  # noqa: E402
    NAMESPACE,
    POOL_SELECTOR,
    build_image,
    pool_deployment,
    up_args,
)
from tests.fixtures.onnx_models import make_onnx_add  # noqa: E402
from tests.fixtures.up_process import UpProcess, with_params  # noqa: E402

MODEL = "onnx_add"
BODY = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
LEASE = "thaw-activator-leader"


async def _until(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        await asyncio.sleep(0.02)
    raise TimeoutError(what)


async def _infer(session: aiohttp.ClientSession, url: str) -> tuple[int, float]:
    start = time.perf_counter()
    try:
        async with session.post(f"{url}/v2/models/{MODEL}/infer", json=BODY) as resp:
            await resp.read()
            return resp.status, time.perf_counter() - start
    except aiohttp.ClientError:
        return -1, time.perf_counter() - start


async def _status(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(f"{url}/thaw/status") as resp:
        return dict(await resp.json())


def _ready_pool(server: FakeKubeApiServer) -> int:
    count = 0
    for pod in server.objects("pods", NAMESPACE):
        labels = pod["metadata"].get("labels") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in pod.get("status", {}).get("conditions") or []
        )
        if ready and all(labels.get(k) == v for k, v in POOL_SELECTOR.items()):
            count += 1
    return count


def _holder(server: FakeKubeApiServer) -> str | None:
    lease = server.get("leases", NAMESPACE, LEASE) or {}
    return lease.get("spec", {}).get("holderIdentity") or None


class Fleet:
    """The fake API server, one kubelet and the warm-pool Deployment."""

    def __init__(self, work: Path, repo: Path, cache: Path, pool: int) -> None:
        self.server = FakeKubeApiServer(FakeApiServerConfig()).start()
        self.kubelet = LocalKubelet(
            self.server.client_configuration(),
            KubeletConfig(
                root=work / "kubelet",
                host_paths={"/models": repo, "/cache": cache},
                probe_period_s=0.2,
            ),
        ).start()
        self.kubeconfig = self.server.write_kubeconfig(work / "kubeconfig", namespace=NAMESPACE)
        self.pool = pool

    async def start_pool(self) -> None:
        async with client.ApiClient(self.server.client_configuration()) as api:
            manifest = pool_deployment(self.pool, preload="onnxruntime")
            # kubernetes_asyncio's stubs want a V1Deployment, wrongly: its ApiClient sends a
            # dict body as it is (sanitize_for_serialization).
            await client.AppsV1Api(api).create_namespaced_deployment(NAMESPACE, manifest)  # type: ignore[arg-type]
        await _until(lambda: _ready_pool(self.server) == self.pool, 120, "the warm pool")

    def activator(self, repo: Path, name: str, *extra: str) -> UpProcess:
        return UpProcess(repo, *up_args(self.kubeconfig, activator_id=name, extra=extra))

    def stop(self) -> None:
        self.kubelet.stop()
        self.server.stop()


async def cold_starts(fleet: Fleet, repo: Path, cache: Path, rounds: int) -> dict[str, Any]:
    """Rounds of: local, then through the scaling leader, then through a follower (the
    request lands on the activator that does not scale: its demand report wakes the leader,
    the leader claims and loads a pod, the follower attaches it), each from zero."""
    local = await asyncio.to_thread(
        UpProcess, repo, "--scaler", "local", "--warm-pool", "1", "--cache", str(cache),
        "--preload-frameworks", "onnxruntime", "--no-image-build", "--log-level", "warning",
        "--model-control-mode", "explicit", "--load-model-at-zero=*",  # rounds: to zero
    )  # fmt: skip
    pair = list(
        await asyncio.gather(
            *(asyncio.to_thread(fleet.activator, repo, f"bench-{i}") for i in range(2))
        )
    )
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    timelines: dict[str, list[dict[str, float]]] = {"leader": [], "follower": []}
    try:
        leader_id = await _until(lambda: _holder(fleet.server), 30, "a leader")
        leader = pair[int(leader_id.removeprefix("bench-"))]
        follower = pair[1 - pair.index(leader)]
        targets = {"local": local, "leader": leader, "follower": follower}
        async with aiohttp.ClientSession() as session:
            for _ in range(rounds):
                for name in VARIANTS:
                    await _settle(session, fleet, [local, leader, follower])
                    sent = time.monotonic()
                    status, seconds = await _infer(session, targets[name].url)
                    if status != 200:
                        raise RuntimeError(
                            f"{name} cold start answered {status}: {targets[name].log()}"
                        )
                    times[name].append(seconds)
                    if name != "local":
                        timelines[name].append(_timeline(fleet.server, sent, sent + seconds))
                    # To zero again: the leader deletes the pod; the others let go of it.
                    for up in (local, leader, follower):
                        async with session.post(f"{up.url}/thaw/models/{MODEL}/scale-to-zero"):
                            pass
    finally:
        local.stop()
        for up in pair:
            up.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    result: dict[str, Any] = {
        "rounds": rounds,
        **{f"{k}_ms": [round(t * 1000, 1) for t in v] for k, v in times.items()},
        **{f"median_{k}_ms": round(m * 1000, 1) for k, m in med.items()},
        "goal": "kubernetes within 50 ms of local",
    }
    for name in ("leader", "follower"):
        result[f"{name}_difference_ms"] = round((med[name] - med["local"]) * 1000, 1)
        result[f"{name}_ratio"] = round(med[name] / med["local"], 2)
        result[f"{name}_met"] = med[name] - med["local"] <= 0.050
        result[f"{name}_timeline_ms"] = {
            phase: round(statistics.median(t[phase] for t in timelines[name]) * 1000, 1)
            for phase in TIMELINE
        }
    result["met"] = result["leader_met"] and result["follower_met"]
    return result


VARIANTS = ("local", "leader", "follower")
TIMELINE = ("to_claim", "claim_to_first_byte")


def _timeline(server: FakeKubeApiServer, sent: float, answered: float) -> dict[str, float]:
    """Where a Kubernetes cold start's time went, from the API server's request log: request
    sent -> the leader's claim PATCH (the follower's report and the leader's decision) -> the
    answer (the model's load, attach, first inference; the `serving` mark is written beside)."""
    claim = None
    for r in server.requests:
        if r.at < sent or r.verb != "patch" or r.resource != "pods":
            continue
        meta = r.body.get("metadata", {}) if isinstance(r.body, dict) else {}
        if "resourceVersion" in meta and "thaw.dev/model" in (meta.get("labels") or {}):
            claim = r.at
            break
    if claim is None:
        raise RuntimeError("no claim in the API server's log for this round")
    return {"to_claim": claim - sent, "claim_to_first_byte": answered - claim}


async def _settle(session: aiohttp.ClientSession, fleet: Fleet, ups: list[UpProcess]) -> None:
    """Every activator's model at zero, both pools full: the next request is a warm-pool
    cold start."""

    async def quiet() -> bool:
        for up in ups:
            doc = await _status(session, up.url)
            pool = doc["warm_pool"]
            model = next(m for m in doc["models"] if m["model"] == MODEL)
            if model["replicas_ready"] and not model["replicas_starting"]:
                # Woken again by a report of the request just served (sent before its end
                # was): to zero once more.
                async with session.post(f"{up.url}/thaw/models/{MODEL}/scale-to-zero"):
                    pass
                return False
            if model["replicas_starting"] or pool["ready"] < pool["size"]:
                return False
        return _ready_pool(fleet.server) == fleet.pool and not _model_pods(fleet.server)

    try:
        await _until(quiet, 120, "every activator at zero with full pools")
    except TimeoutError:
        for up in ups:
            doc = await _status(session, up.url)
            model = next(m for m in doc["models"] if m["model"] == MODEL)
            print(f"{up.url}: {model} pool {doc['warm_pool']}", file=sys.stderr)
        for pod in fleet.server.objects("pods", NAMESPACE):
            meta = pod["metadata"]
            print(meta["name"], meta.get("labels"), meta.get("annotations"), file=sys.stderr)
        raise
    await asyncio.sleep(1.5)  # the local pool's refill delay and the kubelet's probes settle


def _model_pods(server: FakeKubeApiServer) -> list[dict[str, Any]]:
    return [
        p
        for p in server.objects("pods", NAMESPACE)
        if "thaw.dev/model" in (p["metadata"].get("labels") or {})
    ]


async def lease_handover(fleet: Fleet, repo: Path, lease_s: int) -> dict[str, Any]:
    ups = await asyncio.gather(
        *(asyncio.to_thread(fleet.activator, repo, f"lease-{i}") for i in range(3))
    )
    by_id = {f"lease-{i}": up for i, up in enumerate(ups)}
    try:
        first = await _until(lambda: _holder(fleet.server), 30, "a leader")
        killed = time.monotonic()
        by_id[first].proc.send_signal(signal.SIGKILL)
        second = await _until(
            lambda: (h := _holder(fleet.server)) not in (None, first) and h, 30, "a new leader"
        )
        after_kill = time.monotonic() - killed
        stopped = time.monotonic()
        by_id[second].proc.send_signal(signal.SIGTERM)
        await _until(
            lambda: (h := _holder(fleet.server)) not in (None, first, second) and h,
            30,
            "a third leader",
        )
        after_release = time.monotonic() - stopped
    finally:
        for up in ups:
            up.stop(signal.SIGKILL)
    return {
        "lease_duration_s": lease_s,
        "after_kill_s": round(after_kill, 3),
        "after_graceful_stop_s": round(after_release, 3),
        "goal": "after a kill within the lease duration; after a graceful stop at once",
        "met": after_kill <= lease_s + 0.5,
    }


async def burst(fleet: Fleet, repo: Path, size: int) -> dict[str, Any]:
    ups = await asyncio.gather(
        *(asyncio.to_thread(fleet.activator, repo, f"burst-{i}") for i in range(2))
    )
    try:
        await _until(lambda: _holder(fleet.server), 30, "a leader")
        await _until(lambda: _ready_pool(fleet.server) == fleet.pool, 120, "the warm pool")
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            start = time.perf_counter()
            results = await asyncio.gather(*(_infer(session, ups[i % 2].url) for i in range(size)))
            wall = time.perf_counter() - start
    finally:
        for up in ups:
            up.stop()
    lost = sum(1 for status, _ in results if status != 200)
    latencies = sorted(seconds for _, seconds in results)
    return {
        "requests": size,
        "activators": 2,
        "lost": lost,
        "wall_s": round(wall, 3),
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 1),
        "p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000, 1),
        "goal": "0 lost",
        "met": lost == 0,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="thaw-kube-bench-"))
    repo, cache = work / "repo", work / "cache"
    with_params(make_onnx_add(repo), scale_to_zero_grace_s=300, max_replicas=4)
    await asyncio.to_thread(build_image, repo / MODEL, cache)
    fleet = await asyncio.to_thread(Fleet, work, repo, cache, 2)
    try:
        await fleet.start_pool()
        results = {"cold_start": await cold_starts(fleet, repo, cache, args.rounds)}
        if not args.cold_only:
            results["burst_from_zero"] = await burst(fleet, repo, args.burst)
            results["lease_handover"] = await lease_handover(fleet, repo, args.lease_s)
    finally:
        await asyncio.to_thread(fleet.stop)
    return results


def report(results: dict[str, Any]) -> str:
    cold = results["cold_start"]
    lease, burst_ = results.get("lease_handover", {}), results.get("burst_from_zero", {})
    rows = [
        "| measurement | Kubernetes backend | baseline / goal | met |",
        "|---|---|---|---|",
    ]
    for name, how in (("leader", "to the scaling leader"), ("follower", "to a follower")):
        line = cold[f"{name}_timeline_ms"]
        rows.append(
            f"| cold start {how}, median of {cold['rounds']} (ms) | {cold[f'median_{name}_ms']} "
            f"(to the claim {line['to_claim']}, claim to first byte "
            f"{line['claim_to_first_byte']}) | local "
            f"{cold['median_local_ms']} ({cold[f'{name}_difference_ms']:+} ms, x"
            f"{cold[f'{name}_ratio']}); goal <= +50 | {'yes' if cold[f'{name}_met'] else 'no'} |"
        )
    if "lease_handover" not in results:
        return "\n".join(rows)
    rows += [
        f"| Lease hand-over after SIGKILL (s) | {lease['after_kill_s']} | lease "
        f"{lease['lease_duration_s']} s | {'yes' if lease['met'] else 'no'} |",
        f"| Lease hand-over after SIGTERM (s) | {lease['after_graceful_stop_s']} | at once | - |",
        f"| burst of {burst_['requests']} from zero, 2 activators | {burst_['lost']} lost, "
        f"p50 {burst_['p50_ms']} ms, p99 {burst_['p99_ms']} ms, {burst_['wall_s']} s | 0 lost | "
        f"{'yes' if burst_['met'] else 'no'} |",
    ]
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--lease-s", type=int, default=2, help="must match up_args' Lease")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--cold-only", action="store_true", help="only the cold starts")
    args = parser.parse_args()
    results = asyncio.run(main_async(args))
    print(report(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
