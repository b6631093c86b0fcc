"""The stub hop's Python alone: each side's work for one `add_sub` execute, without a socket.

    python benchmarks/stub_hop_cpu.py [--requests 20000] [--rounds 5] [--tree DIR]

The hop's cost in a real run (stub_round_trip.py, serve_throughput.py) is this Python plus the
system calls and the wake-ups of two processes; this isolates the Python, which is what a change
of the codecs or of pb_utils moves, in one thread with `time.thread_time` (steady to ~1 µs on a
shared machine, where the real runs swing by 10%). Steps, per execute of one request:

    server  encode:  the execute message of one request (two FP32[16] inputs), as bytes
    stub    execute: that datagram decoded, the pb_utils requests built, the model run, its
                     `done` encoded (Stub._execute with a channel that keeps what it is sent)
    server  answer:  the `done` datagram decoded and turned into the request's response

`--tree DIR` measures another checkout (a base revision, `git worktree add /tmp/base REV`): its
packages are imported instead of this one's. The steps reach into each side's internals
(`Stub._execute`, `StubAnswers.results`): they are what a request runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STEPS = ("server encode", "stub execute", "server answer")


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000, help="executes per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tree", type=Path, help="another checkout whose code to measure")
    args = parser.parse_args(argv)
    if args.requests < 1 or args.rounds < 1:
        parser.error("requests and rounds must be >= 1")
    return args


def _steps(scratch: Path) -> dict[str, Callable[[], Any]]:
    """Each step as a call (imports here: `--tree` decides which checkout they come from)."""
    import numpy as np

    from benchmarks.workloads import ADD_SUB_ELEMENTS, write_add_sub
    from runtime.inference import InferRequest, InferTensor
    from runtime.python import pb_utils
    from runtime.python.stub.stub_main import Stub
    from runtime.python.stub.wire import Channel, Encoded, Message, channel_pair, decode_all, encode
    from runtime.python.stub_backend import _execute_message

    class KeptChannel(Channel):
        """The stub's channel, keeping what it is sent (encoded) instead of sending it."""

        sent: Encoded | None = None

        def send(self, message: Message) -> None:
            self.sent = encode(message)

    write_add_sub(scratch)
    _, stub_end = channel_pair()
    channel = KeptChannel(stub_end)
    stub = Stub(channel)
    pb_utils.install_host(stub.host)
    outputs = [{"name": f"OUTPUT{i}", "data_type": "TYPE_FP32"} for i in range(2)]
    config = json.dumps({"output": outputs})
    model_file = scratch / "add_sub" / "1" / "model.py"
    stub._init(
        {"model_file": str(model_file), "decoupled": False, "args": {"model_config": config}}
    )
    if stub.runner is None:
        raise SystemExit("add_sub did not initialize in the stub")

    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal(ADD_SUB_ELEMENTS).astype(np.float32) for _ in range(2)]
    shape = (ADD_SUB_ELEMENTS,)
    names = ("INPUT0", "INPUT1")
    tensors = [InferTensor(n, "FP32", shape, a) for n, a in zip(names, inputs, strict=True)]
    request = InferRequest("add_sub", "1", tensors)
    execute = encode(_execute_message(1, [request])[0])

    def stub_execute() -> None:
        (message,) = decode_all(execute.payload, [])
        stub._execute(message)

    stub_execute()
    done = channel.sent
    if done is None:
        raise SystemExit("the stub sent no answer")
    server, results = _server_answers()

    def server_answer() -> Any:
        (reply,) = decode_all(done.payload, [])
        server._executing[1] = [request]
        return results(1, [request], reply)

    (answer,), _ = server_answer()
    if not np.array_equal(answer.outputs[0].data, inputs[0] + inputs[1]):
        raise SystemExit("add_sub answered OUTPUT0 wrongly")
    return {
        "server encode": lambda: encode(_execute_message(1, [request])[0]),
        "stub execute": stub_execute,
        "server answer": server_answer,
    }


def _server_answers() -> tuple[Any, Callable[..., Any]]:
    """The server's side of add_sub's instance, and its call that turns a `done` into results
    (a `--tree` from before runtime.python.stub_answers: the instance's own `_results`)."""
    name, version, instance = "add_sub", "1", "add_sub_0_0"
    declared = {"OUTPUT0": "FP32", "OUTPUT1": "FP32"}
    try:
        from runtime.python.stub_answers import StubAnswers
    except ImportError:
        from runtime.python.stub_backend import StubPython

        server: Any = StubPython()
        server._name, server._version, server._instance = name, version, instance
        server._declared = declared
        return server, server._results
    answers = StubAnswers(name=name, version=version, instance=instance, declared=declared)
    return answers, answers.results


def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    """µs of thread CPU per call of each step, per round (steps interleaved within a round)."""
    out: dict[str, list[float]] = {step: [] for step in STEPS}
    with tempfile.TemporaryDirectory(prefix="thaw-stub-hop-") as scratch:
        steps = _steps(Path(scratch))
        for _ in range(args.rounds):
            for step in STEPS:
                call = steps[step]
                start = time.thread_time()
                for _ in range(args.requests):
                    call()
                out[step].append(1e6 * (time.thread_time() - start) / args.requests)
    return out


def render(results: dict[str, list[float]]) -> str:
    lines = ["| step | µs per execute, median (min to max) |", "|---|---:|"]
    for step, values in results.items():
        lines.append(
            f"| {step} | {statistics.median(values):.2f} ({min(values):.2f} to {max(values):.2f}) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's benchmarks
    if args.tree is not None:  # its packages first (benchmarks.workloads from here is fine)
        sys.path.insert(0, str(args.tree.resolve()))
    from benchmarks.machine import machine_line

    load_start = os.getloadavg()[0]
    results = measure(args)
    print(render(results))
    print(machine_line(load_start, os.getloadavg()[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
