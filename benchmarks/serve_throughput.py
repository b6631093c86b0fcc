"""Serving throughput: req/s and p50/p99 latency of `thaw serve` beside Triton and KServe.

    python benchmarks/serve_throughput.py [--repo model_repository] [--duration-s 4]
        [--concurrency 1 8 32] [--peers thaw,triton,kserve,mlserver] [--models add_sub,resnet50]
        [--protocols http,http-binary,grpc] [--thaw-python-runtime process,in_process]
        [--thaw-base-tree DIR]

`--thaw-python-runtime` runs one thaw server per mode given (`thaw[process]`, `thaw[in_process]`,
`thaw[auto]`), each with its Python models' `thaw.python_runtime` parameter set so, beside the
other peers in the same run.

`--protocols http-binary` sends the same tensors in Triton's binary tensor extension (inputs and
outputs as raw bytes after a JSON header, as tritonclient.http with `binary_data=True`).

Every cell also reports the server's CPU per request: user+sys of its whole process tree (the
server and its Python stubs, Thaw's or Triton's) over the measured window, divided by the
requests it answered. On a machine where client, server and stubs share a few cores, that is
what decides throughput, and it holds up better than req/s when other work shares the machine.

`--protocols grpc` measures the KServe v2 gRPC endpoint (`ModelInfer`, raw_input_contents as
tritonclient.grpc sends) of the servers that have one (thaw, Triton, native_spike), with the
same closed-loop client.

`--peers ...,native_spike` adds decision 0025's measurement spike (benchmarks/peers.py
`NativeSpikePeer`: a native front before Thaw's own stub process; add_sub only).

Every server runs on 127.0.0.1, on the same model files (hard links into one folder per server),
driven by the same aiohttp client in this process. The whole run re-executes itself inside a
private network namespace (`unshare -n`), because KServe can only bind 0.0.0.0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.load_client import LoadResult, Payload, run_grpc_load, run_load
from benchmarks.machine import machine_line
from benchmarks.peers import (
    BENCH_DIR,
    ROOT,
    KServePeer,
    MLServerPeer,
    NativeSpikePeer,
    PeerError,
    PeerHandle,
    ThawNativeFrontPeer,
    ThawPeer,
    TritonPeer,
    free_port,
    in_private_netns,
)
from benchmarks.proc_cpu import tree_cpu_s
from benchmarks.serve_report import BASE, Cell, is_thaw, median_round, render_spread, render_table
from benchmarks.workloads import (
    Workload,
    add_sub_workload,
    resnet50_workload,
    write_add_sub,
)

logger = logging.getLogger("serve_throughput")

PEERS = {
    "thaw": ThawPeer,
    "triton": TritonPeer,
    "kserve": KServePeer,
    "mlserver": MLServerPeer,
    "native_spike": NativeSpikePeer,  # decision 0025's measurement spike: add_sub only
    "thaw_native_front": ThawNativeFrontPeer,  # `thaw serve --front native` (decision 0032)
}


def _link_tree(src: Path, dst: Path) -> None:
    """Hard-link every file of `src` under `dst` (copy across filesystems): same bytes, no copy."""
    for path in src.rglob("*"):
        target = dst / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, target)
            except OSError:
                shutil.copy2(path, target)


def build_repo(run_dir: Path, name: str, sources: dict[str, Path]) -> Path:
    """`<run_dir>/repos/<name>` holding the given model folders."""
    repo = run_dir / "repos" / name
    repo.mkdir(parents=True)
    for model, src in sources.items():
        _link_tree(src, repo / model)
    return repo


def _first_grpc_answer(address: str, workload: Workload) -> str | None:
    import grpc

    assert workload.grpc is not None and workload.grpc_check is not None

    async def call() -> str | None:
        async with grpc.aio.insecure_channel(
            address, options=[("grpc.max_receive_message_length", -1)]
        ) as channel:
            assert workload.grpc is not None and workload.grpc_check is not None
            answer = await channel.unary_unary(workload.grpc.method)(
                workload.grpc.message, timeout=60
            )
            return workload.grpc_check(answer)

    try:
        return asyncio.run(call())
    except grpc.RpcError as exc:
        return f"gRPC request failed: {exc}"


def _first_answer(url: str, payload: Payload, check: Callable[[bytes], str | None]) -> str | None:
    request = urllib.request.Request(url + payload.path, data=payload.body, headers=payload.headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return check(response.read())
    except OSError as exc:
        return f"request failed: {exc}"


def _check_binary(server: Server, workload: Workload) -> None:
    """Whether `server` answers `workload` right with binary tensors (HTTP)."""
    assert server.handle is not None
    if workload.binary is None or workload.binary_check is None:
        server.binary_notes[workload.model] = "no binary request"
        return
    wrong = _first_answer(server.handle.url, workload.binary, workload.binary_check)
    if wrong is None:
        server.serves_binary.add(workload.model)
    else:
        logger.error(
            "%s answers %s wrongly with binary tensors: %s", server.name, workload.model, wrong
        )
        server.binary_notes[workload.model] = "wrong answer"


@dataclass
class Server:
    """A peer as this run sees it: running (`handle`) or not, with the models it answers right."""

    name: str
    handle: PeerHandle | None = None
    serves: set[str] = field(default_factory=set)
    notes: dict[str, str] = field(default_factory=dict)  # model -> why it is not measured
    serves_grpc: set[str] = field(default_factory=set)
    grpc_notes: dict[str, str] = field(default_factory=dict)
    serves_binary: set[str] = field(default_factory=set)  # HTTP with binary tensors
    binary_notes: dict[str, str] = field(default_factory=dict)


def peer_kind(server: str) -> str:
    """The PEERS key of a server name: `thaw[process]` -> `thaw`."""
    return "thaw" if is_thaw(server) else server


def python_runtime(server: str) -> str | None:
    """The Python runtime mode a thaw server name carries: `thaw[process]` -> `process`."""
    head, bracket, rest = server.partition("[")
    return rest[:-1] if bracket and head in ("thaw", BASE) else None


def server_names(
    peers: list[str], thaw_python_runtimes: list[str], *, with_base: bool = False
) -> list[str]:
    """The servers of a run: `thaw` expands to one server per Python runtime mode, if any (and
    each has a `thaw-base` twin, run from the base tree, `with_base`)."""
    names: list[str] = []
    for peer in peers:
        if peer != "thaw":
            names.append(peer)
            continue
        thaws = [BASE, "thaw"] if with_base else ["thaw"]
        if thaw_python_runtimes:
            names += [f"{t}[{mode}]" for mode in thaw_python_runtimes for t in thaws]
        else:
            names += thaws
    return names


_PYTHON_RUNTIME = 'parameters {{ key: "thaw.python_runtime" value {{ string_value: "{mode}" }} }}\n'


def set_python_runtime(config_path: Path, mode: str) -> None:
    """Give a Python model's config.pbtxt a `thaw.python_runtime` parameter (a new file, not
    the hard link the repository shares with the other servers)."""
    text = config_path.read_text()
    config_path.unlink()
    config_path.write_text(text.rstrip("\n") + "\n" + _PYTHON_RUNTIME.format(mode=mode))


def start_server(
    name: str, workloads: list[Workload], sources: dict[str, Path], args: argparse.Namespace
) -> Server:
    """Install and start one peer with every model it can serve; check each model's answer."""
    server = Server(name)
    peer = (
        ThawPeer(tree=args.thaw_base_tree)
        if name.partition("[")[0] == BASE
        else PEERS[peer_kind(name)]()
    )
    try:
        if hasattr(peer, "prepare"):
            peer.prepare()
    except PeerError as exc:
        server.notes = {w.model: "not installed" for w in workloads}
        logger.error("%s not installed: %s", name, exc)
        return server
    served = [w for w in workloads if w.kind in peer.backends]
    server.notes = {w.model: f"no {w.kind} backend" for w in workloads if w not in served}
    if not served:
        return server
    repo = build_repo(args.run_dir, name, {w.model: sources[w.model] for w in served})
    mode = python_runtime(name)
    if mode is not None:
        for workload in served:
            if workload.kind == "python":
                set_python_runtime(repo / workload.model / "config.pbtxt", mode)
    grpc_port = free_port() if "grpc" in args.protocols else None
    try:
        server.handle = peer.start(
            repo, free_port(), timeout_s=args.start_timeout_s, grpc_port=grpc_port
        )
    except PeerError as exc:
        logger.error("%s did not start: %s", name, exc)
        server.notes.update({w.model: "did not start" for w in served})
        return server
    server.grpc_notes = dict(server.notes)
    server.binary_notes = dict(server.notes)
    for workload in served:
        wrong = _first_answer(server.handle.url, workload.payload, workload.check)
        if wrong is None:
            server.serves.add(workload.model)
        else:
            logger.error("%s answers %s wrongly: %s", name, workload.model, wrong)
            server.notes[workload.model] = "wrong answer"
        if "http-binary" in args.protocols:
            _check_binary(server, workload)
        if grpc_port is None:
            continue
        if server.handle.grpc_address is None or workload.grpc is None:
            server.grpc_notes[workload.model] = "no gRPC endpoint"
            continue
        wrong = _first_grpc_answer(server.handle.grpc_address, workload)
        if wrong is None:
            server.serves_grpc.add(workload.model)
        else:
            logger.error("%s answers %s wrongly over gRPC: %s", name, workload.model, wrong)
            server.grpc_notes[workload.model] = "wrong answer"
    return server


def measure(
    servers: list[Server], workloads: list[Workload], args: argparse.Namespace
) -> list[Cell]:
    """Every (model, concurrency) cell on every server, `--rounds` times, servers interleaved.

    All servers stay up for the whole run and take turns cell by cell (the order rotating each
    round), so background load on a shared machine hits them alike; each cell reports its
    median round by req/s (the lower middle one for an even count).
    """
    cells: list[Cell] = []
    for protocol in args.protocols:
        for workload in workloads:
            for concurrency in args.concurrency:
                cells += _measure_group(servers, workload, concurrency, protocol, args)
    return cells


def _measure_group(
    servers: list[Server],
    workload: Workload,
    concurrency: int,
    protocol: str,
    args: argparse.Namespace,
) -> list[Cell]:
    """One (protocol, model, concurrency) row group: every server, `--rounds` times."""
    grpc = protocol == "grpc"
    rounds: dict[str, list[LoadResult]] = {}
    for round_index in range(args.rounds):
        shift = round_index % max(1, len(servers))
        for server in servers[shift:] + servers[:shift]:
            serves = _served(server, protocol)
            if server.handle is None or workload.model not in serves:
                continue
            target = server.handle.grpc_address if grpc else server.handle.url
            assert target is not None  # serves_grpc holds only servers with an address
            pid = server.handle.process.pid
            result = _run_cell(server.name, target, workload, concurrency, args, protocol, pid)
            rounds.setdefault(server.name, []).append(result)
    cells = []
    for server in servers:
        notes = {"grpc": server.grpc_notes, "http-binary": server.binary_notes}
        note = notes.get(protocol, server.notes).get(workload.model, "")
        ran = rounds.get(server.name, [])
        median = median_round(ran)
        cells.append(
            Cell(server.name, workload.model, concurrency, median, note, protocol, tuple(ran))
        )
    return cells


def _served(server: Server, protocol: str) -> set[str]:
    """The models `server` answers right over `protocol`."""
    if protocol == "grpc":
        return server.serves_grpc
    return server.serves_binary if protocol == "http-binary" else server.serves


def _run_cell(
    name: str,
    target: str,
    workload: Workload,
    concurrency: int,
    args: argparse.Namespace,
    protocol: str = "http",
    pid: int | None = None,
) -> LoadResult:
    """One cell; with the server's `pid`, also its process tree's CPU per request."""
    probe = (lambda: tree_cpu_s(pid)) if pid is not None else None
    window = {"concurrency": concurrency, "duration_s": args.duration_s, "warmup_s": args.warmup_s}
    if protocol == "grpc":
        assert workload.grpc is not None
        result = asyncio.run(run_grpc_load(target, workload.grpc, **window, cpu_probe=probe))
    else:
        payload = workload.binary if protocol == "http-binary" else workload.payload
        assert payload is not None  # a server serves http-binary only with a binary request
        result = asyncio.run(run_load(target, payload, **window, cpu_probe=probe))
    cpu = result.cpu_us_per_request
    logger.info(
        "%-8s %-4s %-9s c=%-3d %8.1f req/s p50 %7.2f ms p99 %7.2f ms cpu %s µs/req errors %d",
        name,
        protocol,
        workload.model,
        concurrency,
        result.rps,
        result.percentile_ms(50),
        result.percentile_ms(99),
        "-" if cpu is None else f"{cpu:.0f}",
        result.errors,
    )
    return result


def _reexec_in_netns(argv: list[str]) -> int | None:
    """Run this script again inside `unshare -n` with loopback up; None if that is impossible."""
    script = 'ip link set lo up && exec "$@"'
    command = [
        "unshare",
        "-n",
        "sh",
        "-c",
        script,
        "sh",
        sys.executable,
        str(Path(__file__).resolve()),
        *argv,
        "--no-netns",
    ]
    try:
        return subprocess.call(command)
    except OSError:
        return None


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repo",
        type=Path,
        default=ROOT / "model_repository",
        help="example repository holding resnet50 (generated if missing)",
    )
    parser.add_argument("--duration-s", type=float, default=4.0, help="measured seconds per cell")
    parser.add_argument("--warmup-s", type=float, default=1.0, help="unmeasured seconds per cell")
    parser.add_argument(
        "--rounds", type=int, default=3, help="runs per cell; the median is reported"
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--peers", default="thaw,triton,kserve,mlserver")
    parser.add_argument("--models", default="add_sub,resnet50")
    parser.add_argument(
        "--protocols",
        default="http",
        help="comma list of http (JSON tensors), http-binary (the binary tensor extension) and "
        "grpc (default http)",
    )
    parser.add_argument(
        "--thaw-python-runtime",
        default="",
        help="comma list of process, in_process, auto: one thaw server per mode, its Python "
        "models' `thaw.python_runtime` parameter set so (default: one thaw, models as written)",
    )
    parser.add_argument(
        "--thaw-base-tree",
        type=Path,
        help="another checkout of this repository (e.g. `git worktree add /tmp/base 81a6383`): "
        "each thaw server gets a `thaw-base` twin run from it, in the same run (before/after "
        "with the server's CPU per request, which before_after.py's base script may lack)",
    )
    parser.add_argument("--start-timeout-s", type=float, default=180.0)
    parser.add_argument("--json", type=Path, help="also write the cells here as JSON")
    parser.add_argument("--no-netns", action="store_true", help="do not enter `unshare -n`")
    args = parser.parse_args(argv)
    args.protocols = [p for p in args.protocols.split(",") if p]
    args.thaw_python_runtime = [m for m in args.thaw_python_runtime.split(",") if m]
    unknown = set(args.peers.split(",")) - set(PEERS)
    unknown |= set(args.thaw_python_runtime) - {"process", "in_process", "auto"}
    unknown |= set(args.protocols) - {"http", "http-binary", "grpc"}
    if (
        unknown
        or not all(0 < c <= 1024 for c in args.concurrency)
        or args.duration_s <= 0
        or args.rounds < 1
    ):
        parser.error(
            f"peers must be among {sorted(PEERS)}, protocols http, http-binary or grpc, thaw "
            "python runtimes process, in_process or auto; concurrency in "
            "[1, 1024]; "
            "duration > 0; rounds >= 1"
        )
    return args


def _workloads(args: argparse.Namespace) -> tuple[list[Workload], dict[str, Path]]:
    wanted = args.models.split(",")
    workloads: list[Workload] = []
    sources: dict[str, Path] = {}
    if "add_sub" in wanted:
        models_dir = args.run_dir / "models"
        write_add_sub(models_dir)
        workloads.append(add_sub_workload())
        sources["add_sub"] = models_dir / "add_sub"
    if "resnet50" in wanted:
        model_file = args.repo / "resnet50" / "1" / "model.onnx"
        if not model_file.is_file():
            generator = ROOT / "examples" / "generate_repository.py"
            subprocess.run([sys.executable, str(generator), str(args.repo)], check=True)
        workloads.append(resnet50_workload(model_file))
        sources["resnet50"] = args.repo / "resnet50"
    return workloads, sources


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not args.no_netns and not in_private_netns():
        code = _reexec_in_netns(argv)
        if code is not None:
            return code
        logger.warning("unshare -n unavailable: running on the host network (KServe skipped)")
    # Everything this run writes lives in its own folder: concurrent runs never collide.
    args.run_dir = BENCH_DIR / "runs" / str(os.getpid())
    shutil.rmtree(args.run_dir, ignore_errors=True)
    workloads, sources = _workloads(args)
    load_start = os.getloadavg()[0]
    servers: list[Server] = []
    try:
        names = server_names(
            args.peers.split(","), args.thaw_python_runtime, with_base=bool(args.thaw_base_tree)
        )
        for name in names:
            servers.append(start_server(name, workloads, sources, args))
        cells = measure(servers, workloads, args)
    finally:
        for server in servers:
            if server.handle is not None:
                server.handle.stop()
        shutil.rmtree(args.run_dir, ignore_errors=True)
    print(render_table(cells))
    if args.rounds > 1:
        print()
        print(render_spread(cells))
    print(machine_line(load_start, os.getloadavg()[0]))
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "server": c.server,
                        "protocol": c.protocol,
                        "model": c.model,
                        "concurrency": c.concurrency,
                        "note": c.note,
                        "rps": c.result.rps if c.result else None,
                        "p50_ms": c.result.percentile_ms(50) if c.result else None,
                        "p99_ms": c.result.percentile_ms(99) if c.result else None,
                        "errors": c.result.errors if c.result else None,
                        "cpu_us_per_request": c.result.cpu_us_per_request if c.result else None,
                    }
                    for c in cells
                ],
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
