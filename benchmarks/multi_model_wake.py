"""Many models waking at once through `thaw up`: each model's time next to its isolated cold start.

    python benchmarks/multi_model_wake.py [--repo model_repository] [--work /tmp/thaw_multi_wake]
                                          [--counts 3,10] [--reps 3] [--no-old-pool] [--json OUT]

For N = 3 (the example repository: resnet50, bert, bert_tokenizer) and N = 10 (those plus
copies of them and two tiny ONNX models), one `thaw up` with its defaults serves the N models
(images built at start-up). Measured in that run, request sent -> response received:

- isolated: each model woken alone from zero replicas, the warm pool settled (median of --reps);
- burst, first: all N woken at the same instant right after start-up: the pool holds its one
  process, the host-memory tier is empty (every model's first wake);
- burst, again: all N scaled to zero and woken at the same instant again (median of --reps):
  the pool has grown to the demand, the host tier holds the images.

Each burst row shows every model's time over its own isolated cold start (goal: <= 1.5x).
With --old-pool (default on for N = 3), the same bursts run once more through a `thaw up`
configured as before this work (one spawned pool process, an arena pre-faulted to the largest
model in it, no host tier), in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.cold_start import Model, Up, timed_infer  # noqa: E402
from benchmarks.machine import machine_line  # noqa: E402

EXAMPLE = [
    Model("resnet50", "model.onnx", "input", (1, 3, 224, 224), "onnxruntime"),
    Model("bert", "model.onnx", "input_ids", (1, 16), "onnxruntime", "INT64", ("attention_mask",)),
    Model("bert_tokenizer", "model.py", "TEXT", (1, 1), "python", "BYTES"),
]


def prepare(source: Path, work: Path, count: int) -> tuple[Path, list[Model]]:
    """A repository of `count` models: the example ones, then copies, then tiny ONNX ones."""
    if not (source / "resnet50").is_dir():
        import subprocess

        gen = [sys.executable, str(ROOT / "examples/generate_repository.py"), str(source)]
        subprocess.run(gen, check=True)
    repo = work / f"repo_{count}"
    models: list[Model] = []
    copies = [*EXAMPLE, *(_renamed(m, f"{m.name}_2") for m in EXAMPLE)]
    for model in copies[: min(count, len(copies))]:
        models.append(model)
        base = model.name.removesuffix("_2")
        if not (repo / model.name).is_dir():
            shutil.copytree(source / base, repo / model.name)
            config = repo / model.name / "config.pbtxt"
            config.write_text(
                config.read_text().replace(f'name: "{base}"', f'name: "{model.name}"')
            )
    for i in range(count - len(models)):
        name = f"tiny_{i}"
        if not (repo / name).is_dir():
            from tests.fixtures.onnx_models import make_identity_fp32

            make_identity_fp32(repo, name)
        models.append(Model(name, "model.onnx", "INPUT0", (1, 16), "onnxruntime"))
    return repo, models


def _renamed(model: Model, name: str) -> Model:
    return Model(name, model.file, model.input_name, model.shape, model.framework,
                 model.datatype, model.extra_inputs)  # fmt: skip


def settle(up: Up, names: list[str]) -> None:
    """Scale `names` to zero; wait until they are cold and the warm pool is at its target."""
    for name in names:
        up.post(f"/thaw/models/{name}/scale-to-zero")
    for name in names:
        up.wait(lambda n=name: up.model(n)["state"] == "cold", 120, f"{name} cold")

    def pool_full() -> bool:
        pool = up.get("/thaw/status")["warm_pool"]
        return bool(pool["ready"] >= pool["size"] and pool["starting"] == 0)

    up.wait(pool_full, 120, "the warm pool at its target")
    time.sleep(1.0)  # the refills' start-up CPU is over


def burst(up: Up, models: list[Model]) -> dict[str, float]:
    """Wake every model at the same instant; each one's request -> response seconds."""
    barrier = threading.Barrier(len(models))
    times: dict[str, float] = {}
    errors: list[str] = []

    def one(model: Model) -> None:
        barrier.wait()
        try:
            times[model.name] = timed_infer(up.url, model)
        except (OSError, RuntimeError) as exc:
            errors.append(f"{model.name}: {exc}")

    threads = [threading.Thread(target=one, args=(m,)) for m in models]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    return times


def run_config(
    repo: Path, work: Path, models: list[Model], reps: int, extra: tuple[str, ...], tag: str
) -> dict[str, Any]:
    cache = work / f"cache_{tag}"
    shutil.rmtree(cache, ignore_errors=True)
    up = Up(repo, cache, work / f"thaw-up-{tag}.log", extra=extra)
    names = [m.name for m in models]
    try:
        up.wait(up.ready, 300, "thaw up ready")
        up.wait(up.images_settled, 900, "image builds")
        time.sleep(1.0)
        first = burst(up, models)  # every model's first wake, one pool process
        pool_after_first = up.get("/thaw/status")["warm_pool"]
        isolated: dict[str, list[float]] = {n: [] for n in names}
        for _ in range(reps):
            for model in models:
                settle(up, [model.name])
                isolated[model.name].append(timed_infer(up.url, model))
        again: dict[str, list[float]] = {n: [] for n in names}
        pools = []
        for _ in range(reps):
            settle(up, names)
            pools.append(up.get("/thaw/status")["warm_pool"]["ready"])
            for name, seconds in burst(up, models).items():
                again[name].append(seconds)
    finally:
        up.stop()
    return {
        "first": first,
        "isolated": isolated,
        "again": again,
        "pool_ready_before_again": pools,
        "pool_after_first": {k: pool_after_first[k] for k in ("size", "ready", "demand")},
    }


def old_pool_flags(repo: Path) -> tuple[str, ...]:
    """`thaw up` as before: one spawned pool process with an arena the size of the largest
    model pre-faulted, no demand sizing, no host tier."""
    largest = max(
        sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) for d in repo.iterdir()
    )
    return ("--fork-server", "off", "--pool-window-s", "0", "--host-cache-bytes", "0",
            "--arena-bytes", str(largest))  # fmt: skip


def report(results: dict[str, Any]) -> str:
    lines = []
    for count, r in results["runs"].items():
        new = r["new"]
        iso = {n: statistics.median(v) for n, v in new["isolated"].items()}
        lines += [
            f"\n### {count} models woken at the same instant (thaw up defaults)\n",
            "| model | isolated cold start (median) | burst, first after start-up | ratio | "
            "burst again (median of reps) | ratio | goal <= 1.5x |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, isolated in iso.items():
            first = new["first"][name]
            again = statistics.median(new["again"][name])
            ok = "met" if again <= 1.5 * isolated else "not met"
            lines.append(
                f"| {name} | {isolated:.3f} s | {first:.3f} s | {first / isolated:.1f}x | "
                f"{again:.3f} s (range {min(new['again'][name]):.3f}-"
                f"{max(new['again'][name]):.3f}) | {again / isolated:.1f}x | {ok} |"
            )
        worst = max(statistics.median(new["again"][n]) / iso[n] for n in iso)
        lines.append(
            f"\nworst ratio, burst again: {worst:.2f}x; pool after the first burst: "
            f"{new['pool_after_first']}; idle pool processes before each later burst: "
            f"{new['pool_ready_before_again']}"
        )
        if "old" in r:
            old = r["old"]
            old_iso = {n: statistics.median(v) for n, v in old["isolated"].items()}
            lines += [
                "\nbaseline, same run: `thaw up` configured as before (one spawned pool "
                "process, arena pre-faulted to the largest model, no host tier)\n",
                "| model | isolated | burst first | burst again (median) | ratio again |",
                "|---|---|---|---|---|",
            ]
            for name, isolated in old_iso.items():
                again = statistics.median(old["again"][name])
                lines.append(
                    f"| {name} | {isolated:.3f} s | {old['first'][name]:.3f} s | {again:.3f} s "
                    f"| {again / isolated:.1f}x |"
                )
    lines.append("\n" + machine_line(*results["load"][:2]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT / "model_repository")
    parser.add_argument("--work", type=Path, default=Path("/tmp/thaw_multi_wake"))
    parser.add_argument("--counts", default="3,10")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--old-pool",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the bursts through the previous pool design (N = 3)",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    args.work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"runs": {}, "load": [os.getloadavg()[0]]}
    for count in (int(c) for c in args.counts.split(",")):
        repo, models = prepare(args.repo, args.work, count)
        run = {"new": run_config(repo, args.work, models, args.reps, (), f"{count}_new")}
        if args.old_pool and count <= 3:
            flags = old_pool_flags(repo)
            run["old"] = run_config(repo, args.work, models, args.reps, flags, f"{count}_old")
        results["runs"][count] = run
    results["load"].append(os.getloadavg()[0])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
