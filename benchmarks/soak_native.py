"""A bounded soak of `thaw serve --front native` (benchmarks/soak.py --target serve-native):
steady good traffic on hot and forwarded models, hostile requests, and churn that changes the
front's hot set under load (unload/load through the repository API) and kills a model's stub,
judged by invariants (benchmarks/soak_native_judge.py).

One `thaw serve --front native --model-control-mode explicit` on loopback
(benchmarks/soak_serve.py) serves five models: two hot Python models and an ONNX model the
front forwards, kept busy by steady traffic; `churn_add_sub`, unloaded and loaded again every
few seconds; `kill_identity`, whose stub is SIGKILLed every --kill-every-s. Timeline:

1. start-up: every model loaded, the front answering the hot ones; the quiet checkpoint: the
   server's and the front's open fds.
2. baseline (10% of --duration, at most 30 s): steady traffic only (HTTP JSON, HTTP binary,
   gRPC through tritonclient): the warm p99 the mixed phase is judged against.
3. mixed: steady traffic goes on; churn traffic (the three classes) at the churned and the
   killed models; the churner and the stub killer; hostile requests (soak_traffic.HOSTILE_CASES)
   at every model, through the front's HTTP and gRPC ports.
4. end: traffic stops, in-flight requests get --client-timeout-s (else hung); every model
   loaded again, the quiet checkpoint again; SIGTERM; nothing may be left running.

Every --sample-s the server's, the front's and every stub's RSS and open fds are read; the
slopes over the steady window (the mixed phase after its first quarter) of the server, the
front and the steady models' stubs must be within the soak's tolerances.
"""

from __future__ import annotations

import itertools
import os
import random
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from benchmarks import soak_report, soak_stats
from benchmarks.soak_native_judge import Faults, Window, expected, judge_native
from benchmarks.soak_serve import CHURN, KILL, SERVE_MODELS, STEADY, Serve, build_serve_repository
from benchmarks.soak_stats import Outcome, ProcSample, Targets
from benchmarks.soak_traffic import (
    HOSTILE_CASES,
    GoodResult,
    ModelSpec,
    grpc_infer,
    hostile,
    http_infer,
)
from benchmarks.soak_up import wait

__all__ = ["NativeSoakConfig", "markdown", "run"]

HOT = ("hot_add_sub", "hot_identity")
_QUIET_TIMEOUT_S = 60.0  # twice the front's pool idle timeout, and a margin
JUDGED_ROLES = frozenset({"server", "front", *(f"stub:{m}" for m in HOT)})


@dataclass(frozen=True)
class NativeSoakConfig:
    duration_s: float
    out: Path
    work: Path
    client_timeout_s: float
    sample_s: float
    warm_pace_s: float
    hostile_pace_s: float
    churn_pace_s: float
    unloaded_s: tuple[float, float]  # how long the churned model stays unloaded (uniform)
    loaded_s: tuple[float, float]  # ... and loaded between unloads
    kill_every_s: float
    seed: int
    targets: Targets

    @property
    def baseline_s(self) -> float:
        return min(30.0, 0.1 * self.duration_s)


class NativeSoak:
    """Shared state of one run: outcomes, process samples, fault windows, requests in flight."""

    def __init__(self, cfg: NativeSoakConfig, serve: Serve) -> None:
        self.cfg = cfg
        self.serve = serve
        self.t0 = time.monotonic()
        self.phase = "setup"
        self.lock = threading.Lock()
        self.outcomes: list[Outcome] = []
        self.samples: list[ProcSample] = []
        self.pids_seen: set[int] = set()
        self.unloads: list[Window] = []
        self.kills: list[Window] = []
        self.stop_traffic = threading.Event()
        self.stop_faults = threading.Event()
        self.stop_sampler = threading.Event()
        self.in_flight: dict[int, tuple[str, str, str, float]] = {}  # klass, model, kind, t
        self.notes: list[str] = []
        self.load: list[tuple[float, float]] = []  # (t, the machine's 1-min load average)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def note(self, text: str) -> None:
        with self.lock:
            self.notes.append(f"{self.now():.0f} s: {text}")

    @contextmanager
    def request(self, klass: str, model: str, kind: str) -> Iterator[None]:
        with self.lock:
            self.in_flight[threading.get_ident()] = (klass, model, kind, self.now())
        try:
            yield
        finally:
            with self.lock:
                self.in_flight.pop(threading.get_ident(), None)

    def record(self, klass: str, model: str, kind: str, started: float, r: GoodResult) -> None:
        outcome = Outcome(klass, model, self.phase, kind, started, r.latency_s, r.result, r.detail)
        with self.lock:
            self.outcomes.append(outcome)

    # -- process sampling

    def sample_processes(self) -> None:
        try:
            procs = self.serve.processes()
        except psutil.NoSuchProcess:
            return
        t = self.now()
        for proc, role in procs:
            try:
                rss, fds = proc.memory_info().rss, proc.num_fds()
            except psutil.NoSuchProcess:
                continue
            with self.lock:
                self.pids_seen.add(proc.pid)
                self.samples.append(ProcSample(t, proc.pid, role, rss, fds))

    def sampler(self) -> None:
        while not self.stop_sampler.wait(self.cfg.sample_s):
            self.sample_processes()
            with self.lock:
                self.load.append((self.now(), os.getloadavg()[0]))

    def quiet_fds(self) -> dict[str, int]:
        """Fewest open fds of the server and of the front over three readings 0.5 s apart."""
        pids = {role: self.serve.pid_of(role) for role in ("server", "front")}
        counts: dict[str, list[int]] = {role: [] for role in pids}
        for _ in range(3):
            for role, pid in pids.items():
                if pid is not None:
                    counts[role].append(psutil.Process(pid).num_fds())
            time.sleep(0.5)
        return {role: min(c) for role, c in counts.items() if c}

    def quiet_fds_again(
        self, start: dict[str, int], timeout_s: float
    ) -> tuple[dict[str, int], float]:
        """`quiet_fds()` read again until every count is back at `start` or `timeout_s` passed
        (the checkpoint then judges the growth): the front closes its pooled connections to
        the server (HTTP and gRPC) only after 20 s idle (native/front/src/upstream.rs
        POOL_IDLE), and its reaper may take as long again. The counts, and the seconds waited."""
        began = time.monotonic()
        while True:
            counts = self.quiet_fds()
            waited = time.monotonic() - began
            back = all(counts.get(role, 0) <= n for role, n in start.items())
            if back or waited > timeout_s:
                return counts, waited
            time.sleep(1.0)

    # -- traffic

    def client(self, klass: str) -> Any:
        if klass.endswith("grpc"):
            return grpcclient.InferenceServerClient(self.serve.grpc_address)
        t = self.cfg.client_timeout_s
        return httpclient.InferenceServerClient(
            self.serve.hostport, connection_timeout=t, network_timeout=t
        )

    def good(self, klass: str, spec: ModelSpec, kind: str, client: Any, rng: random.Random) -> None:
        started = self.now()
        timeout = self.cfg.client_timeout_s
        with self.request(klass, spec.name, kind):
            if klass.endswith("grpc"):
                result = grpc_infer(client, spec, rng, timeout_s=timeout)
            else:
                binary = klass.endswith("binary")
                result = http_infer(client, spec, rng, binary=binary, timeout_s=timeout)
        self.record(klass, spec.name, kind, started, result)

    def worker(
        self, klass: str, kind: str, specs: list[ModelSpec], pace_s: float, seed: int
    ) -> None:
        rng = random.Random(seed)
        client = self.client(klass)
        try:
            for spec in itertools.cycle(specs):
                if self.stop_traffic.is_set():
                    return
                self.good(klass, spec, kind, client, rng)
                time.sleep(pace_s * rng.uniform(0.5, 1.5))
        finally:
            client.close()

    def hostile_worker(self, seed: int) -> None:
        rng = random.Random(seed)
        cases = list(HOSTILE_CASES)
        while not self.stop_traffic.is_set():
            rng.shuffle(cases)
            for case in cases:
                if self.stop_traffic.is_set():
                    return
                model, started = rng.choice(SERVE_MODELS).name, self.now()
                serve, klass = self.serve, f"hostile:{case}"
                with self.request(klass, model, "hostile"):
                    result, seconds, detail = hostile(
                        case, model, serve.host, serve.port, serve.grpc_port,
                        self.cfg.client_timeout_s,
                    )  # fmt: skip
                self.record(klass, model, "hostile", started, GoodResult(result, seconds, detail))
                time.sleep(self.cfg.hostile_pace_s * rng.uniform(0.5, 1.5))

    # -- faults

    def churner(self, seed: int) -> None:
        """Unload the churned model, wait, load it again, wait; each unload a Window that ends
        when its load was answered (one that never ends fails the run)."""
        rng = random.Random(seed)
        while not self.stop_faults.wait(rng.uniform(*self.cfg.loaded_s)):
            start = self.now()
            try:
                self.serve.unload(CHURN.name)
                time.sleep(rng.uniform(*self.cfg.unloaded_s))
                self.serve.load(CHURN.name)
            except (OSError, RuntimeError) as exc:
                self.note(f"churn: {exc}")
                with self.lock:
                    self.unloads.append(Window(CHURN.name, start, None))
                return
            with self.lock:
                self.unloads.append(Window(CHURN.name, start, self.now()))

    def killer(self, seed: int) -> None:
        """SIGKILL the killed model's stub every --kill-every-s; each kill a Window that ends
        when the server's next stub for the model is ready (within 60 s, else it never ends)."""
        rng = random.Random(seed)
        while not self.stop_faults.wait(self.cfg.kill_every_s * rng.uniform(0.5, 1.5)):
            pid = self.serve.latest_stub(KILL.name)
            if pid is None:
                self.note("kill: no stub of the killed model")
                continue
            start = self.now()
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                self.note(f"kill: stub pid {pid} already gone")
                continue
            end = None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if self.serve.latest_stub(KILL.name) not in (pid, None):
                    end = self.now()
                    break
                time.sleep(0.05)
            with self.lock:
                self.kills.append(Window(KILL.name, start, end))
            if end is None:
                self.note(f"kill: no new stub of {KILL.name} within 60 s of killing pid {pid}")
                return


def answered_by_front(metrics_text: str) -> dict[str, int]:
    """thaw_native_front_answered_total per model, from the server's /metrics text."""
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(metrics_text):
        for s in family.samples:
            if s.name == "thaw_native_front_answered_total":
                model = s.labels["model"]
                counts[model] = counts.get(model, 0) + int(s.value)
    return counts


def by_minute(
    outcomes: list[Outcome], load: list[tuple[float, float]]
) -> list[dict[str, float | int]]:
    """Per minute of the run: the warm requests answered, their p99 (ms), and the machine's
    highest 1-min load average then (what else ran on it moves the p99 with it)."""
    rows = []
    last = int(max((o.started_s for o in outcomes), default=0) // 60)
    for minute in range(last + 1):
        warm = [
            o.latency_s
            for o in outcomes
            if o.kind == "warm" and o.result == "ok" and int(o.started_s // 60) == minute
        ]
        loads = [v for t, v in load if int(t // 60) == minute]
        rows.append(
            {
                "minute": minute,
                "warm": len(warm),
                "warm_p99_ms": 1000 * soak_stats.percentile(warm, 99),
                "load_max": max(loads, default=float("nan")),
            }
        )
    return rows


def _threads(soak: NativeSoak, cfg: NativeSoakConfig) -> tuple[list[threading.Thread], ...]:
    """(steady workers, mixed-phase traffic, fault makers)."""
    fwd = [m for m in STEADY if m.name not in HOT]
    hot = [m for m in STEADY if m.name in HOT]
    steady = [
        ("http_json", [hot[0], fwd[0]]),
        ("http_binary", [hot[1], hot[0]]),
        ("grpc", list(STEADY)),
    ]
    pace = cfg.warm_pace_s
    steady_threads = [
        threading.Thread(target=soak.worker, args=(k, "warm", specs, pace, i))
        for i, (k, specs) in enumerate(steady)
    ]
    churn_threads = [
        threading.Thread(
            target=soak.worker,
            args=(f"churn_{k}", "churn", [CHURN, KILL], cfg.churn_pace_s, 10 + i),
        )
        for i, k in enumerate(("http_json", "http_binary", "grpc"))
    ]
    hostile = [threading.Thread(target=soak.hostile_worker, args=(20 + i,)) for i in range(2)]
    faults = [
        threading.Thread(target=soak.churner, args=(30,)),
        threading.Thread(target=soak.killer, args=(31,)),
    ]
    return steady_threads, churn_threads + hostile, faults


def _settle(soak: NativeSoak, serve: Serve) -> None:
    """Every model loaded again (the churner may have stopped between unload and load)."""
    for spec in SERVE_MODELS:
        if not serve.model_ready(spec.name):
            soak.note(f"end: {spec.name} not ready; loading it")
            serve.load(spec.name)
    time.sleep(1.0)


def run(cfg: NativeSoakConfig) -> dict[str, Any]:
    cfg.out.mkdir(parents=True, exist_ok=True)
    load = [os.getloadavg()[0]]
    repo = cfg.work / "repo"
    build_serve_repository(repo)
    serve = Serve(repo, out=cfg.out)
    soak = NativeSoak(cfg, serve)
    sampler = threading.Thread(target=soak.sampler, daemon=True)
    fds_start: dict[str, int] = {}
    fds_end: dict[str, int] = {}
    quiet_waited_s = 0.0
    answered: dict[str, int] = {}
    try:
        wait(serve.ready, 180, "every model ready")
        wait(lambda: all(serve.front_serves(m) >= 1 for m in (*HOT, CHURN.name)), 60, "hot")
        time.sleep(1.0)
        fds_start = soak.quiet_fds()
        sampler.start()
        steady, mixed, faults = _threads(soak, cfg)
        soak.phase = "baseline"
        mixed_at = soak.now() + cfg.baseline_s
        end_at = soak.now() + cfg.duration_s
        for t in steady:
            t.start()
        time.sleep(max(0.0, mixed_at - soak.now()))
        soak.phase = "mixed"
        for t in mixed + faults:
            t.start()
        time.sleep(max(0.0, end_at - soak.now()))
        soak.stop_faults.set()
        for t in faults:
            t.join(120)
        soak.stop_traffic.set()
        stop_at = soak.now()
        join_deadline = time.monotonic() + cfg.client_timeout_s + 15
        for t in steady + mixed:
            t.join(max(0.1, join_deadline - time.monotonic()))
        with soak.lock:
            for klass, model, kind, t0 in soak.in_flight.values():  # never came back: hung
                soak.outcomes.append(
                    Outcome(klass, model, "mixed", kind, t0, stop_at - t0, "hung", "never returned")
                )
        soak.phase = "end"
        _settle(soak, serve)
        fds_end, quiet_waited_s = soak.quiet_fds_again(fds_start, _QUIET_TIMEOUT_S)
        answered = answered_by_front(serve.metrics())
        front_serves_churned = serve.front_serves(CHURN.name)
    finally:
        soak.stop_faults.set()
        soak.stop_traffic.set()
        soak.stop_sampler.set()
        exit_code = serve.stop()
        sampler.join(timeout=30)
    time.sleep(1.0)
    left = sorted(pid for pid in soak.pids_seen if _alive(pid))
    load.append(os.getloadavg()[0])
    window = (mixed_at + 0.25 * (end_at - mixed_at), end_at)
    series = soak_stats.series_by_process(soak.samples)
    outcomes = expected(
        soak.outcomes, Faults(tuple(soak.unloads), tuple(soak.kills), front_serves_churned)
    )
    checks = judge_native(
        outcomes,
        series,
        faults=Faults(tuple(soak.unloads), tuple(soak.kills), front_serves_churned),
        window=window,
        targets=cfg.targets,
        answered_by_front=answered,
        hot=(*HOT, CHURN.name, KILL.name),
        fd_checkpoints={
            role: (fds_start[role], fds_end[role])
            for role in ("server", "front")
            if role in fds_start and role in fds_end
        },
        exit_code=exit_code,
        left_running=left,
        judged_roles=JUDGED_ROLES,
    )
    processes = soak_report.process_table(series, window, cfg.targets, JUDGED_ROLES)
    short = processes[-1]["role"].rsplit(": ", 1)[1]
    processes[-1]["role"] = f"short-lived (stubs of the churned and killed models): {short}"
    return {
        "target": "serve-native",
        "command": " ".join(sys.argv),
        "load_average": load,
        "cpus": os.cpu_count(),
        "thaw_serve_argv": serve.argv[2:],
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
        "timeline_s": {
            "baseline": [mixed_at - cfg.baseline_s, mixed_at],
            "mixed": [mixed_at, end_at],
            "steady_window": list(window),
        },
        "unload_cycles": len(soak.unloads),
        "stub_kills": len(soak.kills),
        "stub_restart_s": [w.end_s - w.start_s for w in soak.kills if w.end_s is not None],
        "answered_by_front": answered,
        "quiet_fds": {"start": fds_start, "end": fds_end, "end_after_s": quiet_waited_s},
        "by_minute": by_minute(outcomes, soak.load),
        "tallies": soak_stats.tallies(outcomes),
        "latency": soak_report.latency_table(outcomes),
        "processes": processes,
        "targets": asdict(cfg.targets),
        "processes_seen": len(soak.pids_seen),
        "checks": [asdict(c) for c in checks],
        "passed": all(c.held for c in checks),
        "notes": soak.notes,
        "failures": [
            asdict(o)
            for o in outcomes
            if o.result in ("error", "wrong", "lost", "hung", "accepted", "server_error")
        ][:50],
    }


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def markdown(report: dict[str, Any]) -> str:
    """The report of a serve-native soak as markdown: the tables, the faults, the verdict."""
    out = soak_report.tables(report)
    restarts = sorted(report["stub_restart_s"])
    restart = (
        f"stub restarts (kill to new stub ready) median "
        f"{1000 * restarts[len(restarts) // 2]:.0f} ms, max {1000 * restarts[-1]:.0f} ms"
        if restarts
        else "no stub restarted"
    )
    out += [
        "",
        f"faults: {report['unload_cycles']} unload/load cycles of {CHURN.name}, "
        f"{report['stub_kills']} SIGKILLs of {KILL.name}'s stub; {restart}; answered by the "
        f"front itself (thaw_native_front_answered_total): {report['answered_by_front']}; "
        f"quiet fds {report['quiet_fds']}",
        f"machine: {report['cpus']} CPUs, 1-min load average {report['load_average'][0]:.1f} at "
        f"start, {report['load_average'][1]:.1f} at end; processes seen: "
        f"{report['processes_seen']}",
    ]
    out += ["", "| minute | warm answered | warm p99 | load average (max) |", "|---|---|---|---|"]
    out += [
        f"| {r['minute']} | {r['warm']} | {r['warm_p99_ms']:.1f} ms | {r['load_max']:.1f} |"
        for r in report["by_minute"]
    ]
    if report["notes"]:
        out += ["", "notes: " + "; ".join(report["notes"][:20])]
    out.append(soak_report.verdict(report))
    return "\n".join(out)
