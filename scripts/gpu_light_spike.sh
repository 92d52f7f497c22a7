#!/usr/bin/env bash
# The --cuda-trace light spike on a GPU host: the interposer's coverage
# against CUPTI (scripts/interpose_census.py) on PyTorch and llama-server,
# and its per-call cost (scripts/bench_percall.py, config light), with
# llama-server built in the background meanwhile. Results go to $OUT.
#
#   GS_ENG=/path/with/llama.cpp-src.tgz+make_tiny_gguf.py bash scripts/gpu_light_spike.sh [step ...]
#   steps: build census gpm percall llama compile e2e (default: build census percall)
#   e2e: llama-server decode speed, bare / bare2 / --cuda-trace off / off with the interposer preloaded
#        (light: no CUPTI) / the default collection, interleaved (GS_E2E_REPS, default 4)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-results}
ENG=${GS_ENG:-$PWD/.eng}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >/dev/null 2>&1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
steps=${*:-build census percall}
for step in $steps; do
  echo "== $step $(date +%T)"
  case $step in
    build)
      if [ ! -x /tmp/eng/build/bin/llama-server ] && [ -f "$ENG/llama.cpp-src.tgz" ]; then
        setsid bash -c "mkdir -p /tmp/eng && tar xzf '$ENG/llama.cpp-src.tgz' -C /tmp/eng && cd /tmp/eng/llama.cpp \
          && cmake -B /tmp/eng/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
             -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF \
             -DLLAMA_BUILD_UI=OFF -DCMAKE_BUILD_TYPE=Release \
          && cmake --build /tmp/eng/build --target llama-server -j12 \
          && python3 '$ENG/make_tiny_gguf.py' /tmp/eng/llama.cpp /tmp/eng/tiny.gguf && touch /tmp/eng/ready" \
          >/tmp/eng-build.log 2>&1 < /dev/null &
      fi
      python3 -m pip install -q --no-build-isolation --no-index --no-deps -e . >"$OUT/build.log" 2>&1 \
        || python3 graphsignal/_native_build.py >>"$OUT/build.log" 2>&1
      python3 csrc/cupti_build.py graphsignal/lib >>"$OUT/build.log" 2>&1
      ls graphsignal/lib >>"$OUT/build.log"
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/build.log";;
    census)
      timeout 200 python3 scripts/interpose_census.py --out /tmp/census --workloads exact,exact_graph,torch_mix \
        >>"$OUT/census.jsonl" 2>>"$OUT/census.err";;
    gpm)
      timeout 80 python3 -m pytest -q -p no:cacheprovider -rs tests/gpu/test_nvml_gpu.py -k gpm >"$OUT/gpm.log" 2>&1;;
    compile)
      timeout 300 python3 scripts/interpose_census.py --out /tmp/census --workloads torch_compile \
        >>"$OUT/census.jsonl" 2>>"$OUT/census.err";;
    percall)
      timeout 130 python3 scripts/bench_percall.py --reps 2 --configs bare,floor:all,ours:hybrid,light,light-sampled \
        --ops sync,h2d_pinned,memset,graph1,graph128,kernel >"$OUT/percall.jsonl" 2>"$OUT/percall.err";;
    llama)
      for i in $(seq 1 60); do [ -f /tmp/eng/ready ] && break; sleep 5; done
      tail -3 /tmp/eng-build.log > "$OUT/eng-build.tail"
      timeout 300 python3 scripts/interpose_census.py --out /tmp/census --workloads "" \
        --llama-server /tmp/eng/build/bin/llama-server --model /tmp/eng/tiny.gguf >>"$OUT/census.jsonl" \
        2>>"$OUT/census.err";;
    e2e)
      for i in $(seq 1 60); do [ -f /tmp/eng/ready ] && break; sleep 5; done
      timeout 420 python3 scripts/engine_e2e.py --llama-server /tmp/eng/build/bin/llama-server \
        --model /tmp/eng/tiny.gguf --modes bare,bare2,off,light,graph \
        --mode "light=--cuda-trace off LD_PRELOAD=$PWD/graphsignal/lib/libgraphsignal_interpose.so" \
        --clients "${GS_E2E_CLIENTS:-1,4}" --reps "${GS_E2E_REPS:-4}" --duration 4 --warmup 1 --deadline 400 \
        --out /tmp/e2e >"$OUT/e2e.jsonl" 2>"$OUT/e2e.err";;
  esac
done
tail -c 1500 /tmp/eng-build.log 2>/dev/null | tail -3
echo "== done $(date +%T)"
