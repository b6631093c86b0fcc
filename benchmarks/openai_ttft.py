"""Time to first token at zero, and tokens/s warm, for a small causal LM on the CPU served
through `thaw up`'s OpenAI API — beside the same model served straight by its own script
(benchmarks/tiny_gpt.py), in the same run.

    thaw up, model at zero   `/thaw/models/tiny_gpt/scale-to-zero`, a warm-pool process
                             idle, then a streamed `/v1/completions`: request -> first token
    thaw up, warm            the same request again, the replica up
    thaw serve, warm         the same request straight to a `thaw serve` of the repository
                             (no activator): where the warm path's cost lies
    direct, fresh process    `python tiny_gpt.py` (start Python, import torch, load the
                             weights): spawn -> first token; then warm rounds in that process

tokens/s is the decode rate: (tokens - 1) / (last token - first token), the same on both
paths. Weights are random (seeded), tokens are bytes: no hub download.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, TypedDict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.cold_start import Up  # noqa: E402
from benchmarks.machine import machine_line  # noqa: E402
from benchmarks.tiny_gpt import make_weights  # noqa: E402
from thawwire.handoff_protocol import listening_url  # noqa: E402

MODEL = "tiny_gpt"
# The models served, by the Python runtime each runs in (docs/python-models.md). Only the default,
# a stub process per instance (which imports torch itself): `thaw up` refuses the setting
# `thaw.python_runtime` (its settings check does not know it yet), so the in-process runtime, whose
# warm-pool process would have imported torch already, cannot be measured at zero here.
RUNTIMES = {"tiny_gpt": "process"}
_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [
  {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true }},
  {{ name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] optional: true }},
  {{ name: "temperature" data_type: TYPE_FP32 dims: [ 1 ] optional: true }},
  {{ name: "seed" data_type: TYPE_UINT64 dims: [ 1 ] optional: true }}
]
output [
  {{ name: "text_output" data_type: TYPE_STRING dims: [ -1 ] }},
  {{ name: "num_input_tokens" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "num_output_tokens" data_type: TYPE_INT32 dims: [ 1 ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters {{ key: "threads" value {{ string_value: "{threads}" }} }}
parameters {{ key: "thaw.max_replicas" value {{ string_value: "1" }} }}
"""


def build_repo(work: Path, *, layers: int, width: int, threads: int) -> Path:
    """A repository with the model in each runtime (the same random weights), whose first
    version folder the direct script loads too."""
    repo = work / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    first = repo / MODEL / "1"
    make_weights(first, layers=layers, width=width, heads=max(width // 64, 1))
    for name in RUNTIMES:
        version = repo / name / "1"
        if version != first:
            shutil.copytree(first, version)
        shutil.copy(ROOT / "benchmarks" / "tiny_gpt.py", version / "tiny_gpt.py")
        shutil.copy(ROOT / "benchmarks" / "tiny_gpt_model.py", version / "model.py")
        config = _CONFIG.format(name=name, threads=threads)
        (repo / name / "config.pbtxt").write_text(config.lstrip())
    return repo


def _decode_rate(stamps: list[float]) -> float:
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else float("nan")


def direct(
    folder: Path, *, prompt: str, max_tokens: int, rounds: int, threads: int
) -> dict[str, Any]:
    """The model served straight by its own script in a fresh process."""
    argv = [sys.executable, str(folder / "tiny_gpt.py"), str(folder), "--prompt", prompt,
            "--max-tokens", str(max_tokens), "--rounds", str(rounds + 1),
            "--threads", str(threads)]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    cold_ttft = time.perf_counter() - start
    if first.strip() != "FIRST":
        raise RuntimeError(f"the direct script said {first!r}")
    doc = json.loads(proc.stdout.readline())
    proc.wait(60)
    warm = doc["rounds"][1:]
    return {
        "cold_ttft_s": [cold_ttft],
        "warm_ttft_s": [r["ttft_s"] for r in warm],
        "tokens_per_s": [_decode_rate(r["stamps"]) for r in warm],
    }


class _Ask(TypedDict):
    """The keyword arguments of `_streamed` that every request of a run shares."""

    prompt: str
    max_tokens: int


def _streamed(client: Any, model: str, *, prompt: str, max_tokens: int) -> tuple[float, float, int]:
    """One streamed completion: (time to first token, decode rate, tokens generated)."""
    start = time.perf_counter()
    stamps: list[float] = []
    tokens = 0
    stream = client.completions.create(
        model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    for chunk in stream:
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        if chunk.choices:  # a token's text, or the choice's end right after its last token
            stamps.append(time.perf_counter() - start)
    if tokens != max_tokens:
        raise RuntimeError(f"asked for {max_tokens} tokens, got {tokens}")
    # Each token's chunk, then the finish chunk: the decode rate over the token chunks.
    return stamps[0], (tokens - 1) / (stamps[-1] - stamps[0]), tokens


def through_up(
    repo: Path, work: Path, *, prompt: str, max_tokens: int, cold: int, warm: int
) -> dict[str, dict[str, Any]]:
    """Each model of RUNTIMES in turn, `cold` times from zero and `warm` requests after each."""
    import openai

    up = Up(repo, work / "cache", work / "up.log", images=False)
    try:
        up.wait(up.ready, 180, "thaw up ready")
        client = openai.OpenAI(base_url=up.url + "/v1", api_key="-", max_retries=0, timeout=300)
        ask: _Ask = {"prompt": prompt, "max_tokens": max_tokens}
        results = {}
        for model in RUNTIMES:
            cold_ttft, warm_ttft, rates = [], [], []
            for _ in range(cold):
                up.cold_and_pool_ready(model)
                cold_ttft.append(_streamed(client, model, **ask)[0])
                for _ in range(warm):
                    ttft, rate, _ = _streamed(client, model, **ask)
                    warm_ttft.append(ttft)
                    rates.append(rate)
            up.post(f"/thaw/models/{model}/scale-to-zero")  # the next one runs alone
            results[model] = {
                "cold_ttft_s": cold_ttft, "warm_ttft_s": warm_ttft, "tokens_per_s": rates,
            }  # fmt: skip
        return results
    finally:
        up.stop()


def straight_to_serve(
    repo: Path, work: Path, *, prompt: str, max_tokens: int, warm: int
) -> dict[str, Any]:
    """Warm requests straight to a `thaw serve` (its first request loads nothing: serve
    loads every model at start)."""
    import openai

    argv = [sys.executable, "-m", "thaw.cli", "serve", str(repo), "--port", "0"]
    with (work / "serve.log").open("wb") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, cwd=ROOT, text=True)
    try:
        assert proc.stdout is not None
        url = None
        while url is None and (line := proc.stdout.readline()):
            url = listening_url(line)
        if url is None:
            raise RuntimeError(f"thaw serve did not start; see {work / 'serve.log'}")
        client = openai.OpenAI(base_url=url + "/v1", api_key="-", max_retries=0, timeout=300)
        ask: _Ask = {"prompt": prompt, "max_tokens": max_tokens}
        _wait_ready(url)
        runs = [_streamed(client, MODEL, **ask) for _ in range(warm)]
        return {
            "warm_ttft_s": [r[0] for r in runs], "tokens_per_s": [r[1] for r in runs],
        }  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(60)


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/v2/health/ready", timeout=10) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} never became ready")


def _cell(values: list[float], fmt: str, unit: str = "") -> str:
    """The median (min-max over the runs) of `values`, or "-" for none."""
    if not values:
        return "-"
    if len(values) == 1:
        return format(values[0], fmt) + unit
    middle, low, high = (format(f(values), fmt) for f in (statistics.median, min, max))
    return f"{middle}{unit} ({low}-{high})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/thaw_openai_ttft"))
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both paths")
    parser.add_argument("--prompt", default="Once upon a time, in a cluster far away,")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--cold", type=int, default=3, help="cold starts through thaw up")
    parser.add_argument("--warm", type=int, default=3, help="warm requests after each")
    parser.add_argument("--json", type=Path, default=None, help="write raw results here")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()[0]
    repo = build_repo(args.work, layers=args.layers, width=args.width, threads=args.threads)
    folder = repo / MODEL / "1"
    weights_mib = (folder / "model.safetensors").stat().st_size / 2**20
    results: dict[str, Any] = {"direct": [], "thaw_up": None}
    # Direct runs before and after thaw up, so a machine that got busier shows in the spread.
    common = {"prompt": args.prompt, "max_tokens": args.max_tokens}
    results["direct"].append(direct(folder, rounds=args.warm, threads=args.threads, **common))
    results["thaw_up"] = through_up(repo, args.work, cold=args.cold, warm=args.warm, **common)
    serve = straight_to_serve(repo, args.work, warm=args.warm * args.cold, **common)
    results["thaw_serve"] = serve
    results["direct"].append(direct(folder, rounds=args.warm, threads=args.threads, **common))
    merged = {k: [v for run in results["direct"] for v in run[k]] for k in results["direct"][0]}
    served = results["thaw_up"]
    print(machine_line(load_start, os.getloadavg()[0]))
    print(
        f"tiny_gpt: {args.layers} layers, width {args.width}, {weights_mib:.0f} MiB fp32, "
        f"{args.max_tokens} tokens, {args.threads} torch thread(s)"
    )
    print()
    print("| path | time to first token, cold | time to first token, warm | tokens/s warm |")
    print("|---|---|---|---|")
    rows = [
        (f"thaw up, `/v1/completions` stream, at zero, python_runtime {RUNTIMES[m]}", served[m])
        for m in RUNTIMES
    ]
    rows.append(("thaw serve straight, `/v1/completions` stream (loaded at start)", serve))
    rows.append(("direct: the model's own script, fresh process", merged))
    for label, run in rows:
        cold_s = _cell(run.get("cold_ttft_s", []), ".2f", " s")
        warm_s = _cell(run["warm_ttft_s"], ".3f", " s")
        print(f"| {label} | {cold_s} | {warm_s} | {_cell(run['tokens_per_s'], '.0f')} |")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
