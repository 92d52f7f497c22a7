#!/usr/bin/env bash
# Runs graphsignal's whole GPU suite on a machine with an NVIDIA GPU: builds
# the native parts with the project's own build, runs every `gpu`-marked test,
# then the GPU benchmarks. Results (logs, JSON lines) go to $OUT (default
# ./gpu-results).
#
#   bash scripts/run_gpu_suite.sh            # tests + benchmarks
#   GS_SKIP_BENCH=1 bash scripts/run_gpu_suite.sh
#
# Offline hosts: put cp3XX manylinux wheels of the missing Python packages
# (e.g. cffi, pycparser, orjson) in .whl/; they are installed into /tmp/site.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# never let a test touch NVLink multicast on shared hosts
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

{
  echo "== machine"
  nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader
  python3 --version
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
  echo "== build (the project's own build: native helper, headers, CUPTI library per CUDA major)"
  python3 -m pip install -q --no-build-isolation --no-index --no-deps -e . 2>&1 | grep -v "WARNING: Running pip" \
    || python3 graphsignal/_native_build.py
  python3 csrc/build_native.py graphsignal/lib
  ls -la graphsignal/lib
} 2>&1 | tee "$OUT/build.log"

rc=0
TIMEOUT_OPT=$(python3 -c 'import pytest_timeout' 2>/dev/null && echo "--timeout=${GS_TEST_TIMEOUT:-300}")
python3 -m pytest -q -m gpu -p no:cacheprovider -rs $TIMEOUT_OPT tests/gpu ${GS_TESTS:-} 2>&1 | tee "$OUT/gpu_tests.log"
rc=${PIPESTATUS[0]}

if [ -z "${GS_SKIP_BENCH:-}" ]; then
  {
    # the in-kernel probe bench in the mode not taken by default (bench_overhead runs the default)
    GRAPHSIGNAL_PROBE_CUDA_MEMORY=mapped python3 scripts/bench_probe_kernel.py
    python3 scripts/bench_telemetry.py
    # per-call cost of syncs, copies, memsets, graph launches and kernels, bare / CUPTI floors / ours
    python3 scripts/bench_percall.py --reps "${GS_PERCALL_REPS:-5}" ${GS_PERCALL_BASELINE:+--baseline "$GS_PERCALL_BASELINE"}
    python3 scripts/bench_sidecar.py
    python3 scripts/bench_overhead.py --reps "${GS_BENCH_REPS:-3}"
  } 2>"$OUT/bench.err" | tee "$OUT/bench.jsonl"
fi
echo "gpu tests exit code: $rc"
exit $rc
