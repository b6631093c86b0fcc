"""Prepare Triton's `perf_analyzer` (the C++ load generator) under `.bench/perf_analyzer`.

    .venv/bin/python -m benchmarks.perf_analyzer          # prepare it; prints the binary's path

The binary ships inside PyPI's `tritonclient` wheel (`tritonclient-X.data/data/bin/`, the last
wheels that carry it are 2.4x-2.51; 2.51.0 matches the Triton the conformance runs compare
against). It is linked against `libb64.so.0d` (Debian's `libb64-0d`, apt-get installed when
missing and this runs as root) and `libcudart.so.12` (PyPI's `nvidia-cuda-runtime-cu12`, in a
virtualenv of its own under `.bench/`); it runs on CPU without a GPU. Nothing is committed:
`.bench/` is ignored.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks.peers import BENCH_DIR, PIP_TIMEOUT_S, PeerError, ensure_venv

__all__ = ["PA_DIR", "TRITONCLIENT_VERSION", "PerfAnalyzer", "installed", "prepare"]

TRITONCLIENT_VERSION = "2.51.0"
PA_DIR = BENCH_DIR / "perf_analyzer"
CUDART_VENV = "perf_analyzer-venv"
CUDART_PACKAGES = ["nvidia-cuda-runtime-cu12"]


@dataclass(frozen=True)
class PerfAnalyzer:
    """A runnable perf_analyzer: its binary and the environment it needs (LD_LIBRARY_PATH)."""

    binary: Path
    env: dict[str, str]

    def run(
        self, args: list[str], *, timeout_s: float, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`perf_analyzer ARGS`, output captured; TimeoutExpired past `timeout_s`."""
        return subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=self.env,
            cwd=cwd,
            check=False,
        )


def _cudart_dir(python: Path) -> Path:
    site = subprocess.check_output(
        [
            str(python),
            "-c",
            "import nvidia.cuda_runtime, os; print(nvidia.cuda_runtime.__path__[0])",
        ],
        text=True,
    ).strip()
    return Path(site) / "lib"


def _env(lib_dirs: list[Path]) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(p) for p in lib_dirs] + [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
    env["LD_LIBRARY_PATH"] = ":".join(paths)
    return env


def installed() -> PerfAnalyzer | None:
    """The prepared perf_analyzer, or None when `prepare()` has not run here (or is stale)."""
    binary = PA_DIR / "bin" / "perf_analyzer"
    marker = PA_DIR / ".thaw-installed"
    python = BENCH_DIR / CUDART_VENV / "bin" / "python"
    if not (binary.is_file() and marker.is_file() and python.is_file()):
        return None
    if marker.read_text().strip() != TRITONCLIENT_VERSION:
        return None
    return PerfAnalyzer(binary, _env([PA_DIR / "lib"]))


def _ensure_libb64() -> None:
    if _has_lib("libb64.so.0d"):
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise PeerError("perf_analyzer needs libb64.so.0d: apt-get install libb64-0d (as root)")
    for argv in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "libb64-0d"],
    ):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise PeerError(f"`{' '.join(argv)}` exited {proc.returncode}: {proc.stderr[-500:]}")


def _has_lib(name: str) -> bool:
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    return f"{name} " in out


def _extract_binary(dest: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="thaw-pa-wheel-") as tmp:
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp]
        argv.append(f"tritonclient=={TRITONCLIENT_VERSION}")
        try:
            subprocess.run(argv, check=True, capture_output=True, timeout=PIP_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            raise PeerError(f"cannot download tritonclient=={TRITONCLIENT_VERSION}: {exc}") from exc
        wheel = next(Path(tmp).glob("tritonclient-*.whl"))
        member = f"tritonclient-{TRITONCLIENT_VERSION}.data/data/bin/perf_analyzer"
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, dest.open("wb") as out:
            shutil.copyfileobj(src, out)
    dest.chmod(0o755)


def prepare() -> PerfAnalyzer:
    """Lay out `.bench/perf_analyzer` (bin/perf_analyzer, lib/ -> libcudart) when missing;
    PeerError when a piece cannot be had."""
    ready = installed()
    if ready is not None:
        return ready
    _ensure_libb64()
    python = ensure_venv(CUDART_VENV, CUDART_PACKAGES)
    (PA_DIR / "bin").mkdir(parents=True, exist_ok=True)
    lib = PA_DIR / "lib"
    if lib.is_symlink() or lib.exists():
        lib.unlink()
    lib.symlink_to(os.path.relpath(_cudart_dir(python).resolve(), PA_DIR.resolve()))
    _extract_binary(PA_DIR / "bin" / "perf_analyzer")
    (PA_DIR / ".thaw-installed").write_text(TRITONCLIENT_VERSION)
    found = installed()
    if found is None:
        raise PeerError(f"perf_analyzer not laid out under {PA_DIR}")
    probe = found.run(["--version"], timeout_s=30)
    if "error while loading shared libraries" in probe.stderr:
        raise PeerError(f"perf_analyzer does not start: {probe.stderr.strip()}")
    return found


if __name__ == "__main__":
    try:
        print(prepare().binary)
    except PeerError as exc:
        print(f"perf_analyzer: {exc}", file=sys.stderr)
        sys.exit(1)
