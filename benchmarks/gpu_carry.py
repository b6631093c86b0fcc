"""Wheels for the lent GPU machine (docs/gpu.md "Running it on a GPU machine"): what Thaw and its
GPU tests need that the machine's image lacks (or has at versions Thaw's generated protobuf and
gRPC code refuse), for its Python, at the versions this checkout's venv runs.

    python benchmarks/gpu_carry.py [--dest .whl] [--python-version 3.12]

The device tool carries the folder (`carry: [".whl"]`, 64 MiB with the working tree);
benchmarks/gpu_device_run.sh installs it there with `pip --no-index --target`. Found by running
Thaw under that machine's package set: tritonclient's gRPC module needs python-rapidjson, its
and grpc_health's generated code need grpcio and protobuf at least as new as their generator,
and the root conftest needs blockbuster (with forbiddenfruit, an sdist: built here).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib import metadata
from pathlib import Path

# Runtime: the model-config schema and gRPC front, the JSON codec, the S3 store (boto3's own).
RUNTIME = (
    "tritonclient", "python-rapidjson", "grpcio", "grpcio-health-checking", "protobuf",
    "orjson", "boto3", "botocore", "s3transfer", "jmespath",
)  # fmt: skip
# The GPU tests: the pytest this checkout runs, its asyncio and timeout plugins, blockbuster.
TESTS = ("pytest", "pluggy", "pytest-asyncio", "pytest-timeout", "blockbuster")
# Published as an sdist only: built into a wheel here (pure Python).
BUILT = ("forbiddenfruit",)
PLATFORMS = (
    "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64",
)  # fmt: skip
CARRY_LIMIT = 64 << 20


def pins(names: tuple[str, ...]) -> list[str]:
    """`name==version` as installed here: the machine runs what the tests here ran."""
    return [f"{name}=={metadata.version(name)}" for name in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dest", type=Path, default=Path(".whl"))
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's Python")
    args = parser.parse_args(argv)
    args.dest.mkdir(parents=True, exist_ok=True)
    for old in args.dest.glob("*.whl"):
        old.unlink()
    pip = [sys.executable, "-m", "pip", "-q"]
    platforms = [f"--platform={p}" for p in PLATFORMS]
    subprocess.run(
        [*pip, "download", "--no-deps", "--only-binary=:all:", "--implementation=cp",
         f"--python-version={args.python_version}", *platforms, "-d", str(args.dest),
         *pins(RUNTIME + TESTS)],
        check=True,
    )  # fmt: skip
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(args.dest), *pins(BUILT)], check=True)
    wheels = sorted(args.dest.glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels)
    print(f"{len(wheels)} wheels, {total / 2**20:.1f} MiB in {args.dest}/")
    if total > CARRY_LIMIT // 2:
        limit = CARRY_LIMIT >> 20
        print(f"over half of the device tool's {limit} MiB carry limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
