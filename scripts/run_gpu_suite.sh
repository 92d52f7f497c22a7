#!/usr/bin/env bash
# Runs graphsignal's whole GPU suite on a machine with an NVIDIA GPU: builds
# the native parts with the project's own build, runs every `gpu`-marked test,
# then the GPU benchmarks. Results (logs, JSON lines) go to $OUT (default
# ./gpu-results).
#
#   bash scripts/run_gpu_suite.sh            # tests + benchmarks
#   GS_SKIP_BENCH=1 bash scripts/run_gpu_suite.sh
#
# A real inference engine (llama.cpp's llama-server, tests/gpu/test_llamacpp_gpu.py
# and scripts/engine_e2e.py), when given its paths; without them those are skipped:
#   GS_LLAMA_SERVER=/path/llama-server  or  GS_LLAMA_SRC=/path/llama.cpp (built into
#       GS_LLAMA_BUILD, default /tmp/gs-llama-build, with cmake)
#   GS_GGUF=/path/model.gguf; when it is missing and GS_MAKE_MODEL_SCRIPT=/path/make_tiny_gguf.py
#       is given, that script writes it (from GS_MAKE_MODEL_SRC, default GS_LLAMA_SRC;
#       GS_MAKE_MODEL_ARGS adds arguments)
#   GS_E2E_ARGS: more engine_e2e.py arguments, e.g. "--reps 3 --duration 12 --clients 1,4"
#
# Offline hosts: put cp3XX manylinux wheels of the missing Python packages
# (e.g. cffi, pycparser, orjson) in .whl/; they are installed into /tmp/site.
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
cd "$(dirname "$0")/.."
# one line and status 2 on a host without a GPU, not a page of failed steps
python3 scripts/benchutil.py --require-gpu run_gpu_suite.sh || exit 2
OUT=${OUT:-$PWD/gpu-results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# the GPU tests keep their numbers, payload excerpts and logs here
export GRAPHSIGNAL_TEST_ARTIFACTS=${GRAPHSIGNAL_TEST_ARTIFACTS:-$OUT/artifacts}
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
  python3 csrc/cupti_build.py graphsignal/lib
  ls -la graphsignal/lib
} 2>&1 | tee "$OUT/build.log"

if [ -n "${GS_LLAMA_SERVER:-}${GS_LLAMA_SRC:-}" ] && [ -n "${GS_GGUF:-}" ]; then
  prep=(--model "$GS_GGUF")
  if [ -n "${GS_LLAMA_SERVER:-}" ]; then
    prep+=(--llama-server "$GS_LLAMA_SERVER")
  else
    prep+=(--llama-src "$GS_LLAMA_SRC" --build-dir "${GS_LLAMA_BUILD:-/tmp/gs-llama-build}")
  fi
  if [ ! -e "$GS_GGUF" ] && [ -n "${GS_MAKE_MODEL_SCRIPT:-}" ]; then
    prep+=(--make-model "${GS_MAKE_MODEL_SRC:-${GS_LLAMA_SRC:-}}" --make-model-script "$GS_MAKE_MODEL_SCRIPT"
           --make-model-args "${GS_MAKE_MODEL_ARGS:-}")
  fi
  echo "== engine: llama-server and model (log: $OUT/engine_prepare.log)"
  if paths=$(python3 scripts/engine_e2e.py "${prep[@]}" --prepare-only 2>"$OUT/engine_prepare.log" | tail -1) \
      && [ -n "$paths" ]; then
    GRAPHSIGNAL_TEST_LLAMA_SERVER=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["llama_server"])' "$paths")
    GRAPHSIGNAL_TEST_GGUF=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["model"])' "$paths")
    export GRAPHSIGNAL_TEST_LLAMA_SERVER GRAPHSIGNAL_TEST_GGUF
    echo "$paths"
  else
    echo "engine preparation failed; the engine tests skip (see $OUT/engine_prepare.log)"
  fi
fi

rc=0
TIMEOUT_OPT=$(python3 -c 'import pytest_timeout' 2>/dev/null && echo "--timeout=${GS_TEST_TIMEOUT:-300}")
# one process (-p no:xdist): the GPU tests share the GPU, and their timings are measured one at a time
python3 -m pytest -q -m gpu -p no:cacheprovider -p no:xdist -rs $TIMEOUT_OPT tests/gpu ${GS_TESTS:-} 2>&1 | tee "$OUT/gpu_tests.log"
rc=${PIPESTATUS[0]}

if [ -z "${GS_SKIP_BENCH:-}" ]; then
  {
    # the in-kernel probe bench in the mode not taken by default (bench_overhead runs the default)
    GRAPHSIGNAL_PROBE_CUDA_MEMORY=mapped python3 scripts/bench_probe_kernel.py
    python3 scripts/bench_telemetry.py
    # the graph-trace toggle spike: what switching GRAPH_TRACE / kernel tracing at run time does (findings, decision)
    python3 scripts/bench_graph_toggle.py --reps "${GS_TOGGLE_REPS:-3}"
    # the CUDA driver interposer's counts against CUPTI's in one process, and the event pairs' bias
    python3 scripts/interpose_census.py --out "$OUT/census" --workloads exact,exact_graph,torch_mix,torch_compile \
      ${GRAPHSIGNAL_TEST_LLAMA_SERVER:+--llama-server "$GRAPHSIGNAL_TEST_LLAMA_SERVER" --model "$GRAPHSIGNAL_TEST_GGUF"}
    # per-call cost of syncs, copies, memsets, graph launches and kernels, bare / CUPTI floors / ours
    python3 scripts/bench_percall.py --reps "${GS_PERCALL_REPS:-5}" ${GS_PERCALL_BASELINE:+--baseline "$GS_PERCALL_BASELINE"}
    # --cuda-trace light's interposer per driver call, inside one process (hundreds of ns apart between processes)
    python3 scripts/bench_percall.py --ab 2000 --reps "${GS_PERCALL_REPS:-5}" --configs bare,light,light-sampled \
      --ops sync,h2d_pinned,memset,graph1,graph128,kernel
    # what an NVTX range costs its thread (no GPU needed; this host's CPU)
    python3 scripts/bench_nvtx.py --reps 3
    python3 scripts/bench_sidecar.py
    python3 scripts/bench_overhead.py --reps "${GS_BENCH_REPS:-3}"
  } 2>"$OUT/bench.err" | tee "$OUT/bench.jsonl"
  if [ -n "${GRAPHSIGNAL_TEST_LLAMA_SERVER:-}" ] && [ -n "${GRAPHSIGNAL_TEST_GGUF:-}" ]; then
    # shellcheck disable=SC2086  # GS_E2E_ARGS is a list of words
    python3 scripts/engine_e2e.py --llama-server "$GRAPHSIGNAL_TEST_LLAMA_SERVER" --model "$GRAPHSIGNAL_TEST_GGUF" \
      --out "$OUT/engine-e2e" ${GS_E2E_ARGS:-} 2>"$OUT/engine_e2e.err" | tee "$OUT/engine_e2e.jsonl"
  fi
fi
echo "gpu tests exit code: $rc"
exit $rc
