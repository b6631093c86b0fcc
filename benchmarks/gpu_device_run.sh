#!/usr/bin/env bash
# What a device session runs on the lent GPU machine (docs/gpu.md), as one command:
#
#   run(command="bash benchmarks/gpu_device_run.sh quick", carry=[".whl"], timeout_s=300)
#
# after `make gpu-carry` made .whl/ here. Installs the carried wheels beside the machine's own
# packages, then: the GPU tests (tests/gpu and the other `gpu`-marked tests); the device check
# --strict --quick; and with `full`, the full check's steps at 1, 4 and 16 GiB. Everything is
# also written under $OUT (what comes back even when the call is cut off).
# Measured on an H200 (2026-12-04): quick ~80 s, full ~300 s more; the machine starts in ~30 s.
set -o pipefail
export PYTHONUNBUFFERED=1
mode=${1:-quick}
out=${OUT:-/tmp/gpu-device-run}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || { echo "carried wheels did not install (make gpu-carry)"; exit 9; }
export PYTHONPATH=/tmp/site:$PWD
# Only the plugins the tests use: the machine's own pytest plugins need not match this pytest.
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 timeout 120 python3 -m pytest -p pytest_asyncio.plugin \
    -p pytest_timeout -p no:cacheprovider -q -rfEs --timeout 60 -m gpu \
    -W ignore::DeprecationWarning -W ignore::UserWarning \
    tests/gpu tests/integration/snapshotter/test_snapshot_compile_cache.py \
    tests/integration/snapshotter/test_snapshot_gpu.py \
    tests/integration/snapshotter/test_snapshot_trt_gpu.py \
    tests/unit/runtime/test_framework_backends.py 2>&1 | tee "$out/pytest.log" | tail -12
tests=$?
# onnxruntime-gpu and TensorRT wheels are over the carry limit: declared absent.
timeout 150 python3 benchmarks/gpu_check.py --strict --quick \
    --allow-missing onnxruntime-gpu,tensorrt --json "$out/quick.json" 2>&1 \
    | tee "$out/quick.log" | sed -n '/^| check/,$p'
quick=$?
full=0
if [ "$mode" = full ]; then
    timeout 400 python3 benchmarks/gpu_check.py --strict --sizes 1,4,16 --budget-s 360 \
        --steps "restore to VRAM,ring shapes,sharded checkpoint to VRAM,cold start,torch.compile,onnxruntime CUDA / TensorRT EP,TensorRT EP-context moved,tensorrt_plan,vLLM" \
        --allow-missing onnxruntime-gpu,tensorrt,vllm --json "$out/full.json" 2>&1 \
        | tee "$out/full.log" | sed -n '/^| check/,$p'
    full=$?
fi
echo "gpu_device_run: tests rc=$tests, quick check rc=$quick, full check rc=$full"
exit $((tests | quick | full))
