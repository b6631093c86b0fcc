"""The GPU path's device check: one command, one table, every number beside its same-run baseline.

    python benchmarks/gpu_check.py [--strict] [--quick] [--allow-missing PKG,...]
                                   [--sizes 1,4,16] [--model-gib 4] [--work .bench/gpu]
                                   [--budget-s 480] [--json FILE] [--steps NAME,...]

Every step of `PLAN` writes rows: measurements beside their baselines (pinned H2D, restore GB/s,
cold starts, first vs warm inference) and proofs that each GPU path really ran on the GPU
(parameters inside the restored device arena, the planned execution provider first in the
session's `get_providers()`, zero `thaw_device_fallbacks_total`, a fork-server child among
NVML's GPU processes, outputs against the CPU). The table ends with a summary: rows exercised,
skipped (and why), failed.

`--strict` (what a device session runs) exits non-zero unless every row ran and held: a row
skipped for the time budget or for a package or tool this machine lacks is a failure too (so
the check cannot pass by skipping), except what `--allow-missing` names (e.g.
`onnxruntime-gpu,tensorrt` on a machine known to have only CPU onnxruntime) and rows whose
hardware is not there. Without CUDA, `--strict` prints every row it would run on a GPU and
exits 1 with "no CUDA device" as its only reason; without `--strict` it prints one line and
exits 0. `--quick` runs the steps marked quick, with 1 GiB sizes (sized for about 3 minutes);
the full check is sized for one 10-minute device call on an H200 (`--budget-s` 480 skips steps
started later). Neither has been timed on a GPU yet.
`--steps` runs only the named steps of `PLAN` (quick or not), in the plan's order: a second
device call reruns what the first found failing, or the full check's steps after a quick one.
Inputs are generated under `--work` and reused by later runs.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import (  # noqa: E402
    gpu_cold_start,
    gpu_environment,
    gpu_fork_child,
    gpu_ort_tensorrt,
    gpu_proofs,
    gpu_restore,
    gpu_ring_shapes,
    gpu_vllm,
)
from benchmarks.gpu_row import Row, Skipped  # noqa: E402


class Check:
    """Collects rows; runs each step unless the time budget is spent. A step's `Skipped`
    (or ImportError: a package is missing) becomes a skipped row, anything else a FAILED row."""

    def __init__(self, budget_s: float) -> None:
        self.rows: list[Row] = []
        self.started = time.perf_counter()
        self.budget_s = budget_s

    def step(self, name: str, fn: Callable[[], list[Row]]) -> None:
        first = len(self.rows)
        elapsed = time.perf_counter() - self.started
        if elapsed > self.budget_s:
            reason = f"time budget ({elapsed:.0f} s of {self.budget_s:.0f})"
            self.rows.append(Row(name, f"skipped: {reason}", skipped=reason))
            return
        try:
            self.rows.extend(fn())
        except Skipped as exc:
            self.rows.append(Row(name, f"skipped: {exc}", skipped=str(exc), missing=exc.missing,
                                 hardware=exc.hardware))  # fmt: skip
        except ImportError as exc:
            missing = exc.name or str(exc)
            self.rows.append(Row(name, f"skipped: {missing} not installed",
                                 skipped=f"{missing} not installed", missing=missing))  # fmt: skip
        except Exception as exc:  # a check script reports every failure as a row and goes on
            traceback.print_exc()  # the row holds the error; the log, where it came from
            self.rows.append(Row(name, f"FAILED: {exc!r}"[:300], ok=False))
        print(f"  {name}: done at {time.perf_counter() - self.started:.0f} s", file=sys.stderr)
        for row in self.rows[first:]:  # as they come: a call cut off at its limit keeps them
            line = f"    {row.check}: {row.result} | {row.baseline} | {row.verdict}"
            print(line, file=sys.stderr)

    def table(self, header: str) -> str:
        lines = [
            header,
            "",
            "| check | result | baseline (same run) | verdict |",
            "|---|---|---|---|",
        ]
        lines += [f"| {r.check} | {r.result} | {r.baseline} | {r.verdict} |" for r in self.rows]
        lines.append(f"\ntotal {time.perf_counter() - self.started:.0f} s")
        return "\n".join(lines)


def strict_reasons(rows: list[Row], allowed_missing: frozenset[str]) -> list[str]:
    """Why `--strict` fails: every failed row, and every skip this machine could have run
    (the time budget, a package not named in `allowed_missing`); hardware skips are allowed."""
    reasons = []
    for row in rows:
        if not row.ok:
            reasons.append(f"failed: {row.check}")
        elif (
            row.skipped is not None
            and not row.hardware
            and (row.missing is None or row.missing not in allowed_missing)
        ):
            reasons.append(f"skipped: {row.check} ({row.skipped})")
    return reasons


def summary(rows: list[Row]) -> str:
    """Rows exercised, skipped (with why) and failed."""
    ran = [r for r in rows if r.skipped is None and r.ok]
    skipped = [r for r in rows if r.skipped is not None]
    failed = [r for r in rows if not r.ok]
    lines = [f"exercised {len(ran)}, skipped {len(skipped)}, failed {len(failed)}"]
    lines += [f"  skipped: {r.check}: {r.skipped}" for r in skipped]
    lines += [f"  FAILED: {r.check}: {r.result}" for r in failed]
    return "\n".join(lines)


@dataclass(frozen=True)
class Step:
    """One step of the check: its name, the rows it writes (as the plan lists them), whether
    `--quick` runs it, and how it runs (`Context` in, rows out)."""

    name: str
    proves: tuple[str, ...]
    run: Callable[[Context], list[Row]]
    quick: bool = True


@dataclass
class Context:
    """What every step gets: torch, the work folder, sizes, and numbers steps share."""

    torch: Any
    work: Path
    sizes: list[float]
    model_gib: float
    quick: bool
    state: dict[str, Any]


PLAN = (
    Step(
        "environment",
        ("onnxruntime wheel (CPU or GPU build, never both), torch, CUDA, cuDNN, TensorRT, driver",),
        lambda c: gpu_environment.environment_rows(c.torch),
    ),
    Step(
        "pinned H2D",
        ("pinned H2D, 1 GiB (best of 5)", "pageable H2D, 1 GiB (best of 2)"),
        lambda c: gpu_restore.h2d_rows(c.torch, c.state),
    ),
    Step(
        "restore to VRAM",
        (
            "restore <N> GiB image -> VRAM, each size, vs pinned H2D",
            "restored VRAM bytes == CPU restore",
            "restore from the host tier, through the ring",
        ),
        lambda c: gpu_restore.restore_rows(c.torch, c.state, c.work, c.sizes),
    ),
    Step(
        "ring shapes",
        ("ring <R> readers x <S> x <M> MiB, 4 GiB image: page cache and host tier GB/s",),
        lambda c: gpu_ring_shapes.ring_shape_rows(c.torch, c.state, c.work),
        quick=False,
    ),
    Step(
        "sharded checkpoint to VRAM",
        (
            "restore <N> GiB sharded checkpoint (<K> shards + tokenizer) -> VRAM vs 1 GiB file",
            "sharded restore: every byte through the pinned ring, == CPU, tokenizer on disk",
        ),
        lambda c: gpu_restore.sharded_rows(c.torch, c.work, c.sizes),
    ),
    Step(
        "torch in the device arena",
        (
            "torch: parameters inside the restored device arena",
            "torch on the GPU: outputs == CPU, zero fallbacks",
        ),
        lambda c: gpu_proofs.torch_arena_rows(c.torch, c.work),
    ),
    Step(
        "onnxruntime CUDA EP",
        ("onnxruntime: planned EP first in get_providers(), zero fallbacks, == CPU",),
        lambda c: gpu_ort_tensorrt.ort_ep_rows(c.work),
    ),
    Step(
        "onnxruntime device initializers",
        (
            "onnxruntime add_initializer, device OrtValues: VRAM the session adds",
            "onnxruntime add_external_initializers, host OrtValues: VRAM the session adds",
        ),
        lambda c: gpu_ort_tensorrt.ort_device_initializer_rows(c.torch, c.work),
    ),
    Step(
        "CUDA warm-up",
        ("CUDA warm-up: pool reserved, pinned staging allocated",),
        lambda c: gpu_proofs.warmup_rows(c.torch, c.work),
    ),
    Step(
        "CUDA graphs",
        ("CUDA graphs: captured at load, replay == CPU, no capture fallback",),
        lambda c: gpu_proofs.graph_rows(c.work),
    ),
    Step(
        "KIND_AUTO",
        ("KIND_AUTO with --target auto: on every GPU, as Triton places it",),
        lambda c: gpu_proofs.kind_auto_rows(c.torch, c.work),
    ),
    Step(
        "out of memory",
        ("out of memory -> 503, then the next load works",),
        lambda c: gpu_proofs.oom_rows(c.torch, c.work),
    ),
    Step(
        "fork-server child",
        ("fork-server child on the GPU (thaw up --target auto, KIND_AUTO model)",),
        lambda c: gpu_fork_child.fork_child_rows(ROOT, c.work),
    ),
    Step(
        "GPU metrics",
        ("Triton GPU metrics (NVML) for every visible GPU",),
        lambda c: gpu_environment.metrics_rows(),
    ),
    Step(
        "cold start",
        (
            "cold start <N> GiB TorchScript, classic / thaw from the page cache / "
            "from the host tier",
            "outputs on the GPU == CPU",
        ),
        lambda c: gpu_cold_start.cold_start_rows(c.torch, c.work, c.model_gib),
        quick=False,
    ),
    Step(
        "onnxruntime CUDA / TensorRT EP",
        (
            "ORT-CUDA: session + 1st inference vs warm",
            "TensorRT EP, no engine cache (builder runs)",
            "TensorRT EP, engines from the image",
        ),
        lambda c: gpu_ort_tensorrt.ort_rows(c.torch, c.work),
        quick=False,
    ),
    Step(
        "TensorRT EP-context moved",
        ("TensorRT EP-context model, folder moved: loads and runs",),
        lambda c: gpu_ort_tensorrt.trt_moved_context_rows(c.work),
        quick=False,
    ),
    Step(
        "tensorrt_plan",
        ("tensorrt_plan, engine from the image: load + 1st inference, == CPU",),
        lambda c: gpu_ort_tensorrt.plan_rows(c.torch, c.work),
        quick=False,
    ),
    Step(
        "torch.compile",
        ("torch.compile (.pt2) on the GPU: == CPU, zero fallbacks",),
        lambda c: gpu_proofs.compile_rows(c.work),
        quick=False,
    ),
    Step("vLLM", (gpu_vllm.ROW,), lambda c: gpu_vllm.vllm_rows(ROOT, c.work), quick=False),
)


def selected_steps(steps: tuple[Step, ...], names: str | None, *, quick: bool) -> tuple[Step, ...]:
    """The steps a run takes: those `--steps` names (quick or not), else the plan (its quick
    steps with `--quick`). An unknown name is refused with the names there are."""
    if names is None:
        return tuple(step for step in steps if step.quick or not quick)
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    known = {step.name for step in steps}
    unknown = [name for name in wanted if name not in known]
    if unknown or not wanted:
        raise ValueError(
            f"--steps: unknown step(s) {unknown or names!r}; the steps are: "
            + ", ".join(step.name for step in steps)
        )
    return tuple(step for step in steps if step.name in wanted)


def plan_listing(steps: tuple[Step, ...], *, quick: bool) -> str:
    """Every row the check would run on a GPU, step by step."""
    lines = [f"rows gpu_check{' --quick' if quick else ''} runs on a GPU:"]
    for step in steps:
        if quick and not step.quick:
            continue
        lines.append(f"- {step.name}{'' if step.quick else ' (full check only)'}")
        lines += [f"    - {row}" for row in step.proves]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--strict", action="store_true", help="fail unless every row ran and held")
    parser.add_argument("--quick", action="store_true", help="the quick steps, 1 GiB sizes")
    parser.add_argument(
        "--allow-missing",
        default="",
        metavar="PKG,...",
        help="packages whose absence --strict accepts (e.g. onnxruntime-gpu)",
    )
    parser.add_argument("--sizes", default=None, help="restore sizes in GiB (default 1,4,16)")
    parser.add_argument("--model-gib", type=float, default=None, help="cold-start model (4-16)")
    parser.add_argument("--work", type=Path, default=ROOT / ".bench" / "gpu")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="skip steps started after this (default 480, --quick 200)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    parser.add_argument(
        "--steps",
        default=None,
        metavar="NAME,...",
        help="only these steps of the plan, quick or not (e.g. 'cold start,torch.compile')",
    )
    args = parser.parse_args(argv)
    try:
        steps = selected_steps(PLAN, args.steps, quick=args.quick)
    except ValueError as exc:
        parser.error(str(exc))
    from snapshotter import cuda_available

    ok, why = cuda_available()
    if not ok:
        if not args.strict:
            print(f"gpu_check: no CUDA device ({why}): nothing to check")
            return 0
        print(plan_listing(PLAN if args.steps is None else steps, quick=args.quick))
        print(f"\ngpu_check --strict: FAILED, 1 reason:\n  no CUDA device ({why})")
        return 1
    import torch

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    sizes_text = args.sizes or ("1" if args.quick else "1,4,16")
    context = Context(
        torch=torch,
        work=work,
        sizes=[float(s) for s in sizes_text.split(",") if s.strip()],
        model_gib=args.model_gib or (1.0 if args.quick else 4.0),
        quick=args.quick,
        state={},
    )
    budget = args.budget_s if args.budget_s is not None else (200.0 if args.quick else 480.0)
    check = Check(budget)
    for step in steps:
        check.step(step.name, functools.partial(step.run, context))
    header = (
        f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
        f"{os.cpu_count()} CPUs; page cache warm; one process, CUDA context ready"
        f"{'; --quick' if args.quick else ''}"
    )
    print(check.table(header))
    print("\n" + summary(check.rows))
    if args.quick and args.steps is None:
        left = [step.name for step in PLAN if not step.quick]
        print(f"--quick: {len(left)} step(s) left for the full check: {', '.join(left)}")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in check.rows], indent=1))
    if args.strict:
        allowed = frozenset(p.strip() for p in args.allow_missing.split(",") if p.strip())
        reasons = strict_reasons(check.rows, allowed)
        if reasons:
            print(f"\ngpu_check --strict: FAILED, {len(reasons)} reason(s):")
            print("\n".join(f"  {r}" for r in reasons))
            return 1
        print("\ngpu_check --strict: every row ran and held")
    return 0 if all(r.ok for r in check.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
