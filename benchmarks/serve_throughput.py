"""Serving throughput: req/s and p50/p99 latency of `thaw serve` beside Triton and KServe.

    python benchmarks/serve_throughput.py [--repo model_repository] [--duration-s 4]
        [--concurrency 1 8 32] [--peers thaw,triton,kserve,mlserver] [--models add_sub,resnet50]
        [--protocols http,grpc] [--thaw-python-runtime process,in_process]

`--thaw-python-runtime` runs one thaw server per mode given (`thaw[process]`, `thaw[in_process]`,
`thaw[auto]`), each with its Python models' `thaw.python_runtime` parameter set so, beside the
other peers in the same run.

`--protocols grpc` measures the KServe v2 gRPC endpoint (`ModelInfer`, raw_input_contents as
tritonclient.grpc sends) of the servers that have one (thaw, Triton), with the same closed-loop
client.

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
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.load_client import LoadResult, run_grpc_load, run_load
from benchmarks.machine import machine_line
from benchmarks.peers import (
    BENCH_DIR,
    ROOT,
    KServePeer,
    MLServerPeer,
    PeerError,
    PeerHandle,
    ThawPeer,
    TritonPeer,
    free_port,
    in_private_netns,
)
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
}


@dataclass(frozen=True)
class Cell:
    """One measurement: a server, a model, a concurrency, and what it got (or why not)."""

    server: str
    model: str
    concurrency: int
    result: LoadResult | None
    note: str = ""
    protocol: str = "http"


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


def _first_answer(url: str, workload: Workload) -> str | None:
    request = urllib.request.Request(
        url + workload.payload.path, data=workload.payload.body, headers=workload.payload.headers
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return workload.check(response.read())
    except OSError as exc:
        return f"request failed: {exc}"


@dataclass
class Server:
    """A peer as this run sees it: running (`handle`) or not, with the models it answers right."""

    name: str
    handle: PeerHandle | None = None
    serves: set[str] = field(default_factory=set)
    notes: dict[str, str] = field(default_factory=dict)  # model -> why it is not measured
    serves_grpc: set[str] = field(default_factory=set)
    grpc_notes: dict[str, str] = field(default_factory=dict)


def is_thaw(server: str) -> bool:
    """Whether a row's server is thaw (`thaw`, or `thaw[<python runtime>]`)."""
    return server == "thaw" or server.startswith("thaw[")


def peer_kind(server: str) -> str:
    """The PEERS key of a server name: `thaw[process]` -> `thaw`."""
    return "thaw" if is_thaw(server) else server


def server_names(peers: list[str], thaw_python_runtimes: list[str]) -> list[str]:
    """The servers of a run: `thaw` expands to one server per Python runtime mode, if any."""
    names: list[str] = []
    for peer in peers:
        if peer == "thaw" and thaw_python_runtimes:
            names += [f"thaw[{mode}]" for mode in thaw_python_runtimes]
        else:
            names.append(peer)
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
    server, peer = Server(name), PEERS[peer_kind(name)]()
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
    if name.startswith("thaw["):
        mode = name[len("thaw[") : -1]
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
    for workload in served:
        wrong = _first_answer(server.handle.url, workload)
        if wrong is None:
            server.serves.add(workload.model)
        else:
            logger.error("%s answers %s wrongly: %s", name, workload.model, wrong)
            server.notes[workload.model] = "wrong answer"
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
            serves = server.serves_grpc if grpc else server.serves
            if server.handle is None or workload.model not in serves:
                continue
            target = server.handle.grpc_address if grpc else server.handle.url
            assert target is not None  # serves_grpc holds only servers with an address
            result = _run_cell(server.name, target, workload, concurrency, args, protocol)
            rounds.setdefault(server.name, []).append(result)
    cells = []
    for server in servers:
        note = (server.grpc_notes if grpc else server.notes).get(workload.model, "")
        median = median_round(rounds.get(server.name, []))
        cells.append(Cell(server.name, workload.model, concurrency, median, note, protocol))
    return cells


def median_round(results: list[LoadResult]) -> LoadResult | None:
    """The round with the median req/s (lower middle for an even count); None without rounds."""
    if not results:
        return None
    ordered = sorted(results, key=lambda r: r.rps)
    return ordered[(len(ordered) - 1) // 2]


def _run_cell(
    name: str,
    target: str,
    workload: Workload,
    concurrency: int,
    args: argparse.Namespace,
    protocol: str = "http",
) -> LoadResult:
    window = {"concurrency": concurrency, "duration_s": args.duration_s, "warmup_s": args.warmup_s}
    if protocol == "grpc":
        assert workload.grpc is not None
        result = asyncio.run(run_grpc_load(target, workload.grpc, **window))
    else:
        result = asyncio.run(run_load(target, workload.payload, **window))
    logger.info(
        "%-8s %-4s %-9s c=%-3d %8.1f req/s p50 %7.2f ms p99 %7.2f ms errors %d",
        name,
        protocol,
        workload.model,
        concurrency,
        result.rps,
        result.percentile_ms(50),
        result.percentile_ms(99),
        result.errors,
    )
    return result


def render_table(cells: list[Cell]) -> str:
    """Markdown table; the last column is req/s over the best non-thaw server's, per row group."""
    lines = [
        "| protocol | model | concurrency | server | req/s | p50 ms | p99 ms | errors "
        "| vs best peer |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[str, str, int], list[Cell]] = {}
    for cell in cells:
        groups.setdefault((cell.protocol, cell.model, cell.concurrency), []).append(cell)
    for (protocol, model, concurrency), group in groups.items():
        peers = [c.result.rps for c in group if c.result and not is_thaw(c.server)]
        best = max(peers, default=0.0)
        for cell in group:
            if cell.result is None:
                lines.append(
                    f"| {protocol} | {model} | {concurrency} | {cell.server} | - | - | - | - "
                    f"| {cell.note} |"
                )
                continue
            r = cell.result
            ratio = f"{r.rps / best:.2f}x" if best > 0 else "-"
            if r.ok == 0:  # slower than the window: say so rather than print 0 and NaN
                ratio = "nothing completed in the window; raise --duration-s"
            lines.append(
                f"| {protocol} | {model} | {concurrency} | {cell.server} | {r.rps:.1f} | "
                f"{r.percentile_ms(50):.2f} | {r.percentile_ms(99):.2f} | {r.errors} | {ratio} |"
            )
    return "\n".join(lines)


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
        "--protocols", default="http", help="http, grpc or both (comma list; default http)"
    )
    parser.add_argument(
        "--thaw-python-runtime",
        default="",
        help="comma list of process, in_process, auto: one thaw server per mode, its Python "
        "models' `thaw.python_runtime` parameter set so (default: one thaw, models as written)",
    )
    parser.add_argument("--start-timeout-s", type=float, default=180.0)
    parser.add_argument("--json", type=Path, help="also write the cells here as JSON")
    parser.add_argument("--no-netns", action="store_true", help="do not enter `unshare -n`")
    args = parser.parse_args(argv)
    args.protocols = [p for p in args.protocols.split(",") if p]
    args.thaw_python_runtime = [m for m in args.thaw_python_runtime.split(",") if m]
    unknown = set(args.peers.split(",")) - set(PEERS)
    unknown |= set(args.thaw_python_runtime) - {"process", "in_process", "auto"}
    unknown |= set(args.protocols) - {"http", "grpc"}
    if (
        unknown
        or not all(0 < c <= 1024 for c in args.concurrency)
        or args.duration_s <= 0
        or args.rounds < 1
    ):
        parser.error(
            f"peers must be among {sorted(PEERS)}, protocols http or grpc, thaw python "
            "runtimes process, in_process or auto; concurrency in "
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
        for name in server_names(args.peers.split(","), args.thaw_python_runtime):
            servers.append(start_server(name, workloads, sources, args))
        cells = measure(servers, workloads, args)
    finally:
        for server in servers:
            if server.handle is not None:
                server.handle.stop()
        shutil.rmtree(args.run_dir, ignore_errors=True)
    print(render_table(cells))
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
                    }
                    for c in cells
                ],
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
