"""The device check's vLLM row: Triton vllm_backend's `model.py`, unchanged, installed as the
`vllm` Python-based backend (`--backend-directory`, as Triton's container) and served by
`thaw serve` on a real vLLM engine, asked once over Triton's generate route and once over the
OpenAI route (greedy: the same text both ways).

Needs, else the row is SKIPPED saying which: `vllm` importable (`pip install vllm`, a CUDA
build); vllm_backend's source, as a directory holding `model.py` and `utils/`
(`$THAW_VLLM_BACKEND_SRC`, e.g. a checkout's `src/`) or a git mirror
(`$TRITON_VLLM_BACKEND_MIRROR`); a model vLLM can load without the network
(`$THAW_VLLM_MODEL`, a local directory or a hub id already in the Hugging Face cache; default
facebook/opt-125m, vllm_backend's sample).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.gpu_row import Row, Skipped
from benchmarks.listening import announced_url

ROW = "vllm_backend model.py on vLLM (thaw serve): generate == OpenAI completion"
_SRC = ("model.py", "utils/metrics.py", "utils/request.py", "utils/vllm_backend_utils.py")
_CONFIG = 'backend: "vllm"\ninstance_group [ { count: 1 kind: KIND_MODEL } ]\n'
_PROMPT = "The capital of France is"


def vllm_rows(root: Path, work: Path) -> list[Row]:
    """Serve vllm_backend's model.py with the real engine; one generate, one completion."""
    if importlib.util.find_spec("vllm") is None:
        raise Skipped("vllm not installed (pip install vllm)", missing="vllm")
    sources = _backend_sources()
    model = os.environ.get("THAW_VLLM_MODEL", "facebook/opt-125m")
    root_dir = Path(tempfile.mkdtemp(prefix="vllm-", dir=work))
    backend, repo = root_dir / "backends" / "vllm", root_dir / "models"
    (backend / "utils").mkdir(parents=True)
    for name, text in sources.items():
        (backend / name).write_bytes(text)  # Triton's layout: the `vllm` Python-based backend
    version = repo / "vllm_model" / "1"
    version.mkdir(parents=True)
    (repo / "vllm_model" / "config.pbtxt").write_text(_CONFIG)
    engine = {"model": model, "gpu_memory_utilization": 0.3, "enforce_eager": True}
    (version / "model.json").write_text(json.dumps(engine))
    argv = [sys.executable, "-m", "thaw.cli", "serve", str(repo), "--port", "0",
            f"--backend-directory={root_dir / 'backends'}"]  # fmt: skip
    started = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, cwd=root)
        try:
            url = announced_url(proc, 600, "thaw serve")
            _ready(f"{url}/v2/models/vllm_model/ready", started + 600)
            loaded_s = time.perf_counter() - started
            return [_answers(url, model, loaded_s)]
        except RuntimeError as exc:
            log.seek(0)
            tail = log.read().decode(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"{exc}: {' | '.join(tail)}") from None
        finally:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


def _backend_sources() -> dict[str, bytes]:
    """model.py and utils/ from `$THAW_VLLM_BACKEND_SRC` or the mirror's `src/` at HEAD."""
    src = os.environ.get("THAW_VLLM_BACKEND_SRC")
    if src:
        return {name: (Path(src) / name).read_bytes() for name in _SRC}
    mirror = os.environ.get("TRITON_VLLM_BACKEND_MIRROR")
    if not mirror:
        raise Skipped(
            "no vllm_backend source ($THAW_VLLM_BACKEND_SRC or $TRITON_VLLM_BACKEND_MIRROR)",
            missing="vllm_backend",
        )
    return {
        name: subprocess.run(["git", "-C", mirror, "show", f"HEAD:src/{name}"],
                             capture_output=True, check=True).stdout
        for name in _SRC
    }  # fmt: skip


def _answers(url: str, model: str, loaded_s: float) -> Row:
    params = json.dumps({"temperature": 0, "max_tokens": 16})
    body = {"text_input": _PROMPT, "sampling_parameters": params, "exclude_input_in_output": True}
    start = time.perf_counter()
    generated = _post(f"{url}/v2/models/vllm_model/generate", body)["text_output"]
    first_s = time.perf_counter() - start
    completion = _post(f"{url}/v1/completions", {"model": "vllm_model", "prompt": _PROMPT,
                                                 "max_tokens": 16, "temperature": 0})  # fmt: skip
    text = completion["choices"][0]["text"]
    ok = bool(generated.strip()) and text == generated
    return Row(
        ROW,
        f"{model}: ready in {loaded_s:.1f} s, 1st generate {first_s:.2f} s: {generated[:60]!r}",
        "the OpenAI completion of the same prompt (greedy)",
        "ok" if ok else f"MISMATCH: completion {text[:60]!r}",
        ok=ok,
    )


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def _ready(url: str, deadline: float) -> None:
    while time.perf_counter() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass  # not ready yet (503), or still starting
        time.sleep(0.5)
    raise RuntimeError("vllm_model was not ready in time")
