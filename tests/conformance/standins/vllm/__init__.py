"""A TEST DOUBLE of vLLM, not vLLM: the stand-in `vllm` package the vllm_backend conformance run
(tests/conformance/triton_vllm_backend.py) puts on the path of `thaw serve`'s Python stubs.

vllm_backend's `model.py` and `utils/` import exactly these names; this package gives each the
shape vLLM (v1, the versions vllm_backend's main branch targets) gives it, so that the backend's
code runs unchanged without a GPU: `AsyncEngineArgs` (a dataclass: an unknown engine argument
is a TypeError, as in vLLM), `AsyncLLM` (an asyncio engine: `generate`, `encode`, `abort`,
`check_health`, `get_supported_tasks`, stat loggers fed after every step), `SamplingParams`,
`PoolingParams`, `RequestOutput` / `CompletionOutput` and the pooling outputs, `LoRARequest`,
`TokensPrompt`, `UsageContext`, `random_uuid`, the v1 metrics types.

What it does NOT do is run a model: the engine "generates" deterministic words chosen from the
prompt's CRC32, one per step (`THAW_VLLM_STANDIN_STEP_S` seconds apart, default 0.01), with
vLLM's cumulative outputs, `max_tokens` (default 16), `stop`, `n`, `seed` (only when
`temperature` > 0, as sampling would) and finish reasons ("length" / "stop"); tokens are
whitespace-separated words. A model's text is therefore never a real model's text: checks that
compare against facebook/opt-125m's output cannot pass here and are left to a GPU run.
`THAW_VLLM_STANDIN_HEALTHY_CHECKS=N` makes `check_health` fail after N calls, as vllm_backend's
L0_check_health_vllm patches vLLM's.

It is never installed: its parent directory is on `PYTHONPATH` only where a conformance runner
puts it (the vllm_backend runner's servers; the QA runners' test clients, for Triton's
`triton_shm_monitor` beside it, import no `vllm`).
"""

import sys

from vllm import request_ids

__version__ = "0.0.0+thaw.standin"

# vLLM keeps `random_uuid` in its grab-bag `vllm.utils`; here it lives in a module named for what
# it is, and `from vllm.utils import random_uuid` (vllm_backend's model.py) finds it under that
# name.
utils = request_ids
sys.modules[f"{__name__}.utils"] = request_ids
