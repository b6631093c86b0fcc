"""tritonserver's per-process device flags, read one way by both CLIs: `thaw serve` applies
them (runtime.config), `thaw up` checks them at its start and gives them to every replica it
starts (`--scaler local`; on Kubernetes the runtime pods' flags are the Helm chart's).

    parse_cuda_pool("0:268435456")   -> (0, 268435456)    `--cuda-memory-pool-byte-size`
    parse_gpu_limit("0:0.8")         -> (0, 0.8)          `--model-load-gpu-limit`
    parse_compute_capability("7.5")  -> 7.5               `--min-supported-compute-capability`
    add_replica_device_arguments(g)  the five flags on `thaw up` (--help says: every replica)
    replica_device_args(args)        -> the replica's argv for them, checked; ValueError names
                                        the flag and value

ValueError's text is the one `thaw serve` refuses them with, so a mistake reads the same on
either command.
"""

from __future__ import annotations

import argparse

from thawserver import ranges

__all__ = [
    "MIN_COMPUTE_CAPABILITY",
    "add_replica_device_arguments",
    "parse_compute_capability",
    "parse_cuda_pool",
    "parse_gpu_limit",
    "replica_device_args",
]


def parse_cuda_pool(text: str) -> tuple[int, int]:
    """`<gpu>:<bytes>` (Triton's `--cuda-memory-pool-byte-size` form) as (gpu, bytes)."""
    gpu, sep, nbytes = text.partition(":")
    if not sep or not gpu.strip().isdigit() or not nbytes.strip().isdigit():
        raise ValueError(
            f"`cuda_memory_pool_byte_size` = {text!r}, must be <gpu>:<bytes>, e.g. 0:268435456"
        )
    return int(gpu), int(nbytes)


def parse_gpu_limit(text: str) -> tuple[int, float]:
    """`<device_id>:<fraction>` (tritonserver's `--model-load-gpu-limit`) as (gpu, fraction)."""
    gpu, sep, fraction = text.partition(":")
    try:
        if not sep or not gpu.strip().isdigit():
            raise ValueError
        return int(gpu), float(fraction)
    except ValueError:
        raise ValueError(
            f"`model_load_gpu_limit` = {text!r}, must be <device_id>:<fraction>, e.g. 0:0.8"
        ) from None


# tritonserver's default `--min-supported-compute-capability` (TRITON_MIN_COMPUTE_CAPABILITY).
MIN_COMPUTE_CAPABILITY = 6.0


def parse_compute_capability(text: str) -> float:
    """`--min-supported-compute-capability`'s value: a number such as 6.0 or 7.5 (tritonserver
    reads a double), at least 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 100.0:  # also NaN
        raise ValueError(
            f"`--min-supported-compute-capability` = {text!r}, must be a compute capability "
            "such as 6.0 or 7.5"
        )
    return value


def add_replica_device_arguments(group: argparse._ActionsContainer) -> None:
    """`thaw up`'s copies of `thaw serve`'s device flags, given to every replica."""
    group.add_argument(
        "--cuda-memory-pool-byte-size", action="append", default=[], metavar="<gpu>:<bytes>",
        help="each replica creates the CUDA context on this GPU and reserves this much device "
        "memory before it is ready (repeatable, one per GPU; Triton's flag)",
    )  # fmt: skip
    group.add_argument(
        "--model-load-gpu-limit", action="append", default=[], metavar="<device_id>:<fraction>",
        help="a replica refuses to create a model's GPU instance on this GPU while its used "
        "memory is over this fraction of its total (repeatable; Triton's flag)",
    )  # fmt: skip
    group.add_argument(
        "--pinned-memory-pool-byte-size", type=int, default=None, metavar="BYTES",
        help="each replica pins a host staging buffer of this size before it is ready "
        "(Triton's flag; default: each restore to a GPU pins its own ring)",
    )  # fmt: skip
    group.add_argument(
        "--model-load-thread-count", type=int, default=None, metavar="N",
        help="models a replica loads at once (Triton's flag; the replica's default 4)",
    )  # fmt: skip
    group.add_argument(
        "--min-supported-compute-capability", default=None, metavar="CC",
        help="GPUs of a lower compute capability are not used by the replicas (Triton's flag; "
        f"default {MIN_COMPUTE_CAPABILITY})",
    )  # fmt: skip


def _check(flag: str, value: float, low: float, high: float) -> None:
    problem = ranges.out_of_range(flag, value, low, high)
    if problem is not None:
        raise ValueError(problem)


def replica_device_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The device flags given to `thaw up`, as a replica's argv (empty when none), each checked
    as `thaw serve` checks it; ValueError names a bad one."""
    argv: list[str] = []
    pools = [parse_cuda_pool(text) for text in args.cuda_memory_pool_byte_size]
    gpus = [gpu for gpu, _ in pools]
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"`--cuda-memory-pool-byte-size` names GPUs {gpus}, each at most once")
    for gpu, nbytes in pools:
        _check("--cuda-memory-pool-byte-size gpu", gpu, 0, 1023)
        _check("--cuda-memory-pool-byte-size bytes", nbytes, 0, 1 << 44)
        argv += ["--cuda-memory-pool-byte-size", f"{gpu}:{nbytes}"]
    limits = dict(parse_gpu_limit(text) for text in args.model_load_gpu_limit)
    for gpu, fraction in limits.items():
        _check("--model-load-gpu-limit gpu", gpu, 0, 1023)
        _check("--model-load-gpu-limit fraction", fraction, 0.0, 1.0)
        argv += ["--model-load-gpu-limit", f"{gpu}:{fraction:g}"]
    if args.pinned_memory_pool_byte_size is not None:
        _check("--pinned-memory-pool-byte-size", args.pinned_memory_pool_byte_size, 0, 1 << 40)
        argv += ["--pinned-memory-pool-byte-size", str(args.pinned_memory_pool_byte_size)]
    if args.model_load_thread_count is not None:
        _check("--model-load-thread-count", args.model_load_thread_count, 1, 1024)
        argv += ["--model-load-thread-count", str(args.model_load_thread_count)]
    if args.min_supported_compute_capability is not None:
        minimum = parse_compute_capability(args.min_supported_compute_capability)
        argv += ["--min-supported-compute-capability", f"{minimum:g}"]
    return tuple(argv)
