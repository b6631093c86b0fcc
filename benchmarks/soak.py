"""A bounded soak of `thaw up` (or, with `--target serve-native`, of `thaw serve --front native`:
benchmarks/soak_native.py): mixed good and hostile traffic over several models with
scale-up/down churn, judged by invariants (nothing lost or hung, latency within a target
measured against a baseline of the same run, RSS and fds flat, every held request answered).

    python benchmarks/soak.py [--duration 600] [--out .bench/soak] [--burst 12] ...

One real `thaw up` (activator + warm pool + real `thaw serve` replicas, loopback only) serves a
generated repository of five models: two kept warm by steady traffic (`hot_*`) and three
(`wake_*`) that a short `--scale-to-zero-grace-s` sends back to zero between bursts, so each
burst is held while a replica is claimed and the model restored. Timeline (seconds of
--duration cover the baseline and the mixed phase):

1. start-up: `thaw up` ready, images built; the quiet checkpoint (every model at zero, the
   pool settled): the activator's open fds; one isolated wake of every model (the reference
   wake latency).
2. baseline (10% of --duration, at most 30 s): warm traffic only (HTTP JSON, HTTP binary,
   gRPC through tritonclient): the warm p99 the mixed phase is judged against.
3. mixed: warm traffic goes on; bursts of --burst requests (HTTP JSON/binary and gRPC) wake
   the wake_* models from zero one after another; hostile requests (benchmarks/soak_traffic.py
   HOSTILE_CASES: malformed JSON, bad binary sizes, unknown models, oversized headers, slow or
   partial requests abandoned, connections dropped mid-request, garbage on the gRPC port) go to
   every model.
4. end: traffic stops, in-flight requests get --client-timeout-s to finish (else hung); every
   model back at zero and the pool back at its start size: the activator's fds again; SIGTERM;
   nothing may be left running.

Every --sample-s the activator's and every descendant's RSS and open fds are read from /proc;
the least-squares slope over the steady window (the mixed phase after its first quarter) of
each process that lived through it must be within --rss-slope-mib-per-min / --fd-slope-per-min
(the activator's fds with the number of processes alive under it held fixed:
soak_stats.fd_growth).
Prints the summary and writes soak-report.json and soak-report.md into --out; exits 1 if any
invariant failed (benchmarks/soak_stats.py judge()).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import os
import random
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402

from benchmarks import soak_native, soak_report, soak_stats  # noqa: E402
from benchmarks.soak_stats import STUB_MODULE, Outcome, ProcSample, Targets  # noqa: E402
from benchmarks.soak_traffic import (  # noqa: E402
    HOSTILE_CASES,
    MODELS,
    GoodResult,
    ModelSpec,
    grpc_infer,
    hostile,
    http_infer,
)
from benchmarks.soak_up import Up, build_repository, cold_starts, wait  # noqa: E402

WARM = [m for m in MODELS if m.warm]
WAKE = [m for m in MODELS if not m.warm]
JUDGED_ROLES = frozenset({"activator", "fork_server", *(f"replica:{m.name}" for m in WARM)})


@dataclass(frozen=True)
class SoakConfig:
    duration_s: float
    out: Path
    work: Path
    burst: int
    client_timeout_s: float
    sample_s: float
    warm_pace_s: float
    hostile_pace_s: float
    grace_s: float
    pool_window_s: float
    seed: int
    targets: Targets

    @property
    def baseline_s(self) -> float:
        return min(30.0, 0.1 * self.duration_s)


# ---- the run ------------------------------------------------------------------------------------


class Soak:
    """Shared state of one run: the outcomes, the process samples, the latest status."""

    def __init__(self, cfg: SoakConfig, up: Up) -> None:
        self.cfg = cfg
        self.up = up
        self.t0 = time.monotonic()
        self.phase = "setup"
        self.lock = threading.Lock()
        self.outcomes: list[Outcome] = []
        self.samples: list[ProcSample] = []
        self.pids_seen: set[int] = set()
        self.status: dict[str, Any] = {}
        self.max_held: dict[str, int] = {}
        self.stop_traffic = threading.Event()
        self.stop_sampler = threading.Event()
        self.in_flight: dict[int, tuple[str, str, float]] = {}  # thread id -> class, model, t
        self.notes: list[str] = []

    def now(self) -> float:
        return time.monotonic() - self.t0

    @contextmanager
    def request(self, klass: str, model: str) -> Iterator[None]:
        with self.lock:
            self.in_flight[threading.get_ident()] = (klass, model, self.now())
        try:
            yield
        finally:
            with self.lock:
                self.in_flight.pop(threading.get_ident(), None)

    def record(self, klass: str, spec: str, kind: str, started: float, r: GoodResult) -> None:
        outcome = Outcome(klass, spec, self.phase, kind, started, r.latency_s, r.result, r.detail)
        with self.lock:
            self.outcomes.append(outcome)

    # -- status and process sampling

    def refresh_status(self) -> dict[str, Any]:
        status = self.up.get("/thaw/status")
        with self.lock:
            self.status = status
            for m in status["models"]:
                self.max_held[m["model"]] = max(
                    self.max_held.get(m["model"], 0), m["held_requests"]
                )
        return status

    def model_state(self, name: str) -> str:
        return str(next(m["state"] for m in self.refresh_status()["models"] if m["model"] == name))

    def at_zero(self, name: str) -> bool:
        return self.model_state(name) == "cold"

    def sample_processes(self) -> None:
        with self.lock:
            replicas = {
                r["pid"]: m["model"]
                for m in self.status.get("models", [])
                for r in m["replicas"]
                if r.get("pid")
            }
        try:
            root = psutil.Process(self.up.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        t = self.now()
        for proc in procs:
            try:
                rss, fds, ppid = proc.memory_info().rss, proc.num_fds(), proc.ppid()
                stub = STUB_MODULE in proc.cmdline()
            except psutil.NoSuchProcess:
                continue
            if proc.pid == root.pid:
                role = "activator"
            elif stub:  # a Python model's stub, or a pool process's spare: no fd of the activator's
                role = "stub"
            elif proc.pid in replicas:
                role = f"replica:{replicas[proc.pid]}"
            elif ppid == root.pid:
                role = "fork_server"
            else:
                role = "pool"
            with self.lock:
                self.pids_seen.add(proc.pid)
                self.samples.append(ProcSample(t, proc.pid, role, rss, fds))

    def sampler(self) -> None:
        while not self.stop_sampler.wait(self.cfg.sample_s):
            try:
                self.refresh_status()
            except (OSError, ValueError) as exc:
                self.notes.append(f"{self.now():.0f} s: /thaw/status failed: {exc}")
            self.sample_processes()

    def activator_fds(self) -> int:
        """Fewest open fds of the activator over three readings 0.5 s apart."""
        proc = psutil.Process(self.up.proc.pid)
        counts = []
        for _ in range(3):
            counts.append(proc.num_fds())
            time.sleep(0.5)
        return min(counts)

    def quiet(self, pool_size: int | None, timeout_s: float) -> bool:
        """Every model at zero and the pool settled (at `pool_size` if given)."""

        def settled() -> bool:
            status = self.refresh_status()
            pool = status["warm_pool"]
            return (
                all(m["state"] == "cold" for m in status["models"])
                and pool["starting"] == 0
                and pool["ready"] >= 1
                and (pool_size is None or pool["size"] == pool_size)
            )

        try:
            wait(settled, timeout_s, "every model at zero, the pool settled")
        except RuntimeError:
            return False
        return True

    # -- traffic

    def good(self, klass: str, spec: ModelSpec, kind: str, client: Any, rng: random.Random) -> None:
        started = self.now()
        timeout = self.cfg.client_timeout_s
        with self.request(klass, spec.name):
            if klass.endswith("grpc"):
                result = grpc_infer(client, spec, rng, timeout_s=timeout)
            else:
                result = http_infer(
                    client, spec, rng, binary=klass.endswith("binary"), timeout_s=timeout
                )
        self.record(klass, spec.name, kind, started, result)

    def client(self, klass: str) -> Any:
        if klass.endswith("grpc"):
            return grpcclient.InferenceServerClient(self.up.grpc_address)
        t = self.cfg.client_timeout_s
        return httpclient.InferenceServerClient(
            self.up.hostport, connection_timeout=t, network_timeout=t
        )

    def warm_worker(self, klass: str, specs: list[ModelSpec], seed: int) -> None:
        rng = random.Random(seed)
        client = self.client(klass)
        try:
            for spec in itertools.cycle(specs):
                if self.stop_traffic.is_set():
                    return
                self.good(klass, spec, "warm", client, rng)
                time.sleep(self.cfg.warm_pace_s * rng.uniform(0.5, 1.5))
        finally:
            client.close()

    def burst(self, spec: ModelSpec, rng: random.Random) -> None:
        """--burst requests at once at a model at zero: all held, all must be answered."""
        classes = ["wake_http_json", "wake_http_binary", "wake_grpc"]
        barrier = threading.Barrier(self.cfg.burst)

        def one(i: int) -> None:
            klass = classes[i % len(classes)]
            client = self.client(klass)
            try:
                barrier.wait()
                self.good(klass, spec, "waking", client, random.Random(rng.random()))
            finally:
                client.close()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(self.cfg.burst)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def waker(self, seed: int) -> None:
        rng = random.Random(seed)
        for spec in itertools.cycle(WAKE):
            if self.stop_traffic.is_set():
                return
            deadline = time.monotonic() + self.cfg.grace_s + 30
            while self.model_state(spec.name) != "cold":
                if self.stop_traffic.is_set():
                    return
                if time.monotonic() > deadline:
                    self.notes.append(f"{self.now():.0f} s: {spec.name} not at zero in time")
                    break
                time.sleep(0.1)
            else:
                self.burst(spec, rng)
            self.stop_traffic.wait(rng.uniform(0, 1.0))

    def hostile_worker(self, seed: int) -> None:
        rng = random.Random(seed)
        cases = list(HOSTILE_CASES)
        while not self.stop_traffic.is_set():
            rng.shuffle(cases)
            for case in cases:
                if self.stop_traffic.is_set():
                    return
                model = rng.choice(MODELS).name
                started = self.now()
                with self.request(f"hostile:{case}", model):
                    result, seconds, detail = hostile(
                        case,
                        model,
                        self.up.host,
                        self.up.port,
                        self.up.grpc_port,
                        self.cfg.client_timeout_s,
                    )
                self.record(
                    f"hostile:{case}",
                    model,
                    "hostile",
                    started,
                    GoodResult(result, seconds, detail),
                )
                time.sleep(self.cfg.hostile_pace_s * rng.uniform(0.5, 1.5))


def reference_wakes(soak: Soak) -> list[float]:
    """One isolated wake of every model from zero (nothing else running): seconds each."""
    rng = random.Random(soak.cfg.seed)
    times = []
    for spec in MODELS:
        wait(functools.partial(soak.at_zero, spec.name), soak.cfg.grace_s + 60, "cold")
        client = soak.client("http_json")
        try:
            soak.good("reference_wake", spec, "reference", client, rng)
        finally:
            client.close()
        times.append(soak.outcomes[-1].latency_s)
    return times


def run(cfg: SoakConfig) -> dict[str, Any]:
    cfg.out.mkdir(parents=True, exist_ok=True)
    repo = cfg.work / "repo"
    build_repository(repo)
    shutil.rmtree(cfg.work / "cache", ignore_errors=True)
    load = [os.getloadavg()[0]]
    up = Up(
        repo, out=cfg.out, cache=cfg.work / "cache", pool_window_s=cfg.pool_window_s,
        grace_s=cfg.grace_s, activation_timeout_s=cfg.client_timeout_s,
    )  # fmt: skip
    soak = Soak(cfg, up)
    sampler = threading.Thread(target=soak.sampler, daemon=True)
    exit_code: int | None = None
    try:
        wait(up.ready, 180, "thaw up ready")
        wait(
            lambda: (
                not {"queued", "building", "pulling"}
                & set(soak.refresh_status()["image_builds"].values())
            ),
            600,
            "image builds",
        )
        sampler.start()
        if not soak.quiet(None, 120):
            raise RuntimeError("thaw up never settled at start")
        pool_size = soak.status["warm_pool"]["size"]
        fds_start = soak.activator_fds()
        refs = reference_wakes(soak)
        ref_median = sorted(refs)[len(refs) // 2]
        targets = cfg.targets
        if not targets.waking_p99_s:
            targets = dataclasses.replace(
                targets, waking_p99_s=max(5 * ref_median, ref_median + 1.0)
            )
        # the warm models were just woken by their reference request; traffic keeps them warm
        workers = [
            threading.Thread(target=soak.warm_worker, args=("http_json", [WARM[0]], 1)),
            threading.Thread(target=soak.warm_worker, args=("http_binary", [WARM[1]], 2)),
            threading.Thread(target=soak.warm_worker, args=("grpc", WARM, 3)),
        ]
        soak.phase = "baseline"
        mixed_at = soak.now() + cfg.baseline_s
        end_at = soak.now() + cfg.duration_s
        for w in workers:
            w.start()
        time.sleep(max(0.0, mixed_at - soak.now()))
        soak.phase = "mixed"
        extra = [
            threading.Thread(target=soak.waker, args=(4,)),
            threading.Thread(target=soak.hostile_worker, args=(5,)),
            threading.Thread(target=soak.hostile_worker, args=(6,)),
        ]
        for w in extra:
            w.start()
        time.sleep(max(0.0, end_at - soak.now()))
        soak.stop_traffic.set()
        stop_at = soak.now()
        join_deadline = time.monotonic() + cfg.client_timeout_s + 15
        for w in workers + extra:
            w.join(max(0.1, join_deadline - time.monotonic()))
        with soak.lock:
            for klass, model, t in soak.in_flight.values():  # never came back: hung
                kind = (
                    "hostile"
                    if klass.startswith("hostile")
                    else "waking"
                    if klass.startswith("wake")
                    else "warm"
                )
                soak.outcomes.append(
                    Outcome(
                        klass, model, "mixed", kind, t, stop_at - t, "hung", "thread never returned"
                    )
                )
        soak.phase = "end"
        quiet_end = soak.quiet(pool_size, cfg.pool_window_s + cfg.grace_s + 60)
        fds_end = soak.activator_fds() if quiet_end else None
        status = soak.refresh_status()
        held_at_end = sum(m["held_requests"] for m in status["models"])
        wakes = cold_starts(up.get("/metrics"))
    finally:
        soak.stop_traffic.set()
        soak.stop_sampler.set()
        exit_code = up.stop()
        sampler.join(timeout=30)
    time.sleep(1.0)
    left = sorted(pid for pid in soak.pids_seen if _alive(pid))
    load.append(os.getloadavg()[0])
    window = (mixed_at + 0.25 * (end_at - mixed_at), end_at)
    series = soak_stats.series_by_process(soak.samples)
    checks = soak_stats.judge(
        soak.outcomes,
        series,
        window=window,
        targets=targets,
        fd_checkpoints=(fds_start, fds_end) if fds_end is not None else None,
        held_at_end=held_at_end,
        wakes=sum(wakes[m.name] for m in WAKE if m.name in wakes),
        exit_code=exit_code,
        left_running=left,
        judged_roles=JUDGED_ROLES,
    )
    return {
        "command": " ".join(sys.argv),
        "thaw_up_argv": up.argv[2:],
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
        "timeline_s": {
            "baseline": [mixed_at - cfg.baseline_s, mixed_at],
            "mixed": [mixed_at, end_at],
            "steady_window": list(window),
        },
        "load_average": load,
        "cpus": os.cpu_count(),
        "reference_wakes_s": refs,
        "reference_wake_median_s": ref_median,
        "cold_starts": wakes,
        "max_held_seen": soak.max_held,
        "tallies": soak_stats.tallies(soak.outcomes),
        "latency": soak_report.latency_table(soak.outcomes),
        "processes": soak_report.process_table(series, window, targets, JUDGED_ROLES),
        "targets": asdict(targets),
        "processes_seen": len(soak.pids_seen),
        "checks": [asdict(c) for c in checks],
        "passed": all(c.held for c in checks),
        "notes": soak.notes,
        "failures": [
            asdict(o)
            for o in soak.outcomes
            if o.result in ("error", "wrong", "lost", "hung", "accepted", "server_error")
        ][:50],
    }


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--duration", type=float, default=600.0, help="seconds of baseline + mixed traffic"
    )
    parser.add_argument("--out", type=Path, default=ROOT / ".bench" / "soak")
    parser.add_argument(
        "--work", type=Path, default=None, help="repository and cache (default OUT/work)"
    )
    parser.add_argument("--burst", type=int, default=12, help="requests per wake burst")
    parser.add_argument(
        "--client-timeout-s",
        type=float,
        default=30.0,
        help="a request with no answer by then is hung (also thaw up's activation timeout)",
    )
    parser.add_argument("--sample-s", type=float, default=1.0)
    parser.add_argument(
        "--warm-pace-s",
        type=float,
        default=0.05,
        help="mean pause between a warm worker's requests",
    )
    parser.add_argument("--hostile-pace-s", type=float, default=0.1)
    parser.add_argument(
        "--grace-s", type=float, default=2.0, help="thaw up --scale-to-zero-grace-s"
    )
    parser.add_argument("--pool-window-s", type=float, default=10.0, help="thaw up --pool-window-s")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warm-p99-factor", type=float, default=3.0)
    parser.add_argument("--warm-p99-floor-ms", type=float, default=50.0)
    parser.add_argument(
        "--waking-p99-s",
        type=float,
        default=None,
        help="default: max(5 x the median isolated wake, 1 s + it)",
    )
    parser.add_argument("--rss-slope-mib-per-min", type=float, default=1.0)
    parser.add_argument("--fd-slope-per-min", type=float, default=1.0)
    parser.add_argument("--fd-checkpoint-delta", type=int, default=2)
    parser.add_argument(
        "--target",
        choices=("up", "serve-native"),
        default="up",
        help="what is soaked: `thaw up` (the activator, scale-to-zero churn), or `thaw serve "
        "--front native` (load/unload churn and stub kills: benchmarks/soak_native.py)",
    )
    parser.add_argument(
        "--kill-every-s",
        type=float,
        default=10.0,
        help="serve-native: mean pause between stub kills",
    )
    args = parser.parse_args(argv)
    targets = Targets(
        warm_p99_factor=args.warm_p99_factor,
        warm_p99_floor_s=args.warm_p99_floor_ms / 1000,
        waking_p99_s=args.waking_p99_s or 0.0,
        rss_slope_bytes_per_min=args.rss_slope_mib_per_min * 2**20,
        fd_slope_per_min=args.fd_slope_per_min,
        fd_checkpoint_delta=args.fd_checkpoint_delta,
    )
    if args.target == "serve-native":
        return _write(
            args.out, soak_native.run(_native_config(args, targets)), soak_native.markdown
        )
    cfg = SoakConfig(
        duration_s=args.duration,
        out=args.out,
        work=args.work or args.out / "work",
        burst=args.burst,
        client_timeout_s=args.client_timeout_s,
        sample_s=args.sample_s,
        warm_pace_s=args.warm_pace_s,
        hostile_pace_s=args.hostile_pace_s,
        grace_s=args.grace_s,
        pool_window_s=args.pool_window_s,
        seed=args.seed,
        targets=targets,
    )
    return _write(cfg.out, run(cfg), soak_report.markdown)


def _native_config(args: argparse.Namespace, targets: Targets) -> soak_native.NativeSoakConfig:
    return soak_native.NativeSoakConfig(
        duration_s=args.duration,
        out=args.out,
        work=args.work or args.out / "work",
        client_timeout_s=args.client_timeout_s,
        sample_s=args.sample_s,
        warm_pace_s=args.warm_pace_s,
        hostile_pace_s=args.hostile_pace_s,
        churn_pace_s=args.warm_pace_s,
        unloaded_s=(0.5, 3.0),
        loaded_s=(2.0, 6.0),
        kill_every_s=args.kill_every_s,
        seed=args.seed,
        targets=targets,
    )


def _write(out: Path, report: dict[str, Any], markdown: Callable[[dict[str, Any]], str]) -> int:
    """soak-report.json and soak-report.md into `out`; the markdown printed; the exit code."""
    text = markdown(report)
    (out / "soak-report.json").write_text(json.dumps(report, indent=2))
    (out / "soak-report.md").write_text(text + "\n")
    print(text)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
