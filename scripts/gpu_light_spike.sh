#!/usr/bin/env bash
# The --cuda-trace light spike on a GPU host: the interposer's coverage
# against CUPTI (scripts/interpose_census.py) on PyTorch and llama-server,
# and its per-call cost (scripts/bench_percall.py, config light), with
# llama-server built in the background meanwhile. Results go to $OUT.
#
#   GS_ENG=/path/with/llama.cpp-src.tgz+make_tiny_gguf.py bash scripts/gpu_light_spike.sh [step ...]
#   steps: build census itest gpm percall ab llama compile wait findings e2e (default: build census percall)
#   build: this package and the interposer; llama-server, the tiny model and the ~1 B one in the background
#          (wait: until they are made); the anchor (graphsignal 1.1.2) from build/e2e/anchor's wheels, if there
#   itest: tests/gpu/test_interpose_gpu.py and GPM's tests (GS_ITEST_K: pytest's -k), census lines kept
#   ab: the interposer's cost per driver call inside one process (bench_percall.py --ab)
#   census: coverage against CUPTI and --cuda-trace light's payload, sampled graph time against CUPTI's
#   llama: the same on llama-server (GS_CENSUS_CLIENTS clients, default 1: a steady decode)
#   findings: the llama-server cases the findings are tested on (scripts/record_findings_cases.py) into $OUT/cases
#   e2e: llama-server decode speed, modes GS_E2E_MODES (default bare,bare2,light,graph,off[,anchor]) on
#        GS_E2E_MODEL (tiny or big), interleaved (GS_E2E_REPS, default 8; GS_E2E_CLIENTS, default 1,4)
set -u
case "${1:-}" in -h|--help) sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
cd "$(dirname "$0")/.."
python3 scripts/benchutil.py --require-gpu gpu_light_spike.sh || exit 2
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
      if [ "${GS_NO_ENGINE:-0}" != 1 ] && [ ! -x /tmp/eng/build/bin/llama-server ] && [ -f "$ENG/llama.cpp-src.tgz" ]; then
        setsid bash -c "mkdir -p /tmp/eng && tar xzf '$ENG/llama.cpp-src.tgz' -C /tmp/eng && cd /tmp/eng/llama.cpp \
          && cmake -B /tmp/eng/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
             -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF \
             -DLLAMA_BUILD_UI=OFF -DCMAKE_BUILD_TYPE=Release \
          && cmake --build /tmp/eng/build --target llama-server -j${GS_BUILD_JOBS:-14} \
          && python3 '$ENG/make_tiny_gguf.py' /tmp/eng/llama.cpp /tmp/eng/tiny.gguf && touch /tmp/eng/ready \
          && python3 '$ENG/make_tiny_gguf.py' /tmp/eng/llama.cpp /tmp/eng/big.gguf --layers 16 --embd 2048 --ff 5632 \
             --heads 32 --kv-heads 8 && touch /tmp/eng/big-ready" \
          >/tmp/eng-build.log 2>&1 < /dev/null &
      fi
      if ls build/e2e/anchor/graphsignal-1.1.2-*.whl >/dev/null 2>&1 && [ ! -x /tmp/anchor/bin/graphsignal-run ]; then
        python3 -m pip install -q --no-index --no-deps --target /tmp/anchor build/e2e/anchor/*.whl >/dev/null 2>&1
      fi
      python3 -m pip install -q --no-build-isolation --no-index --no-deps -e . >"$OUT/build.log" 2>&1 \
        || python3 graphsignal/_native_build.py >>"$OUT/build.log" 2>&1
      python3 csrc/cupti_build.py graphsignal/lib >>"$OUT/build.log" 2>&1
      ls graphsignal/lib >>"$OUT/build.log"
      nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/build.log";;
    census)
      timeout "${GS_CENSUS_TIMEOUT:-200}" python3 scripts/interpose_census.py --out /tmp/census \
        --workloads "${GS_CENSUS_WORKLOADS:-exact,exact_graph,torch_mix}" \
        >>"$OUT/census.jsonl" 2>>"$OUT/census.err";;
    itest)
      # the interposer's GPU tests (counts against CUPTI on PyTorch, and on llama-server once built) and GPM's;
      # every census line they measure into $OUT/census.jsonl
      if [ -f /tmp/eng/ready ]; then
        export GRAPHSIGNAL_TEST_LLAMA_SERVER=/tmp/eng/build/bin/llama-server GRAPHSIGNAL_TEST_GGUF=/tmp/eng/tiny.gguf
      fi
      GRAPHSIGNAL_TEST_CENSUS_OUT=$OUT/census.jsonl timeout "${GS_ITEST_TIMEOUT:-420}" python3 -m pytest -q \
        -p no:cacheprovider -rs --durations=0 tests/gpu/test_interpose_gpu.py tests/gpu/test_nvml_gpu.py \
        -k "${GS_ITEST_K:-interpose or light_payload or gpm}" >>"$OUT/itest.log" 2>&1;;
    gpm)
      timeout 80 python3 -m pytest -q -p no:cacheprovider -rs tests/gpu/test_nvml_gpu.py -k gpm >"$OUT/gpm.log" 2>&1;;
    compile)
      timeout 300 python3 scripts/interpose_census.py --out /tmp/census --workloads torch_compile \
        >>"$OUT/census.jsonl" 2>>"$OUT/census.err";;
    percall)
      timeout "${GS_PERCALL_TIMEOUT:-240}" python3 scripts/bench_percall.py --reps "${GS_PERCALL_REPS:-5}" \
        --configs bare,ours:hybrid,light,light-sampled \
        --ops sync,h2d_pinned,memset,graph1,graph128,kernel >"$OUT/percall.jsonl" 2>"$OUT/percall.err";;
    ab)
      # what the interposer adds per driver call, inside one process (alternating blocks through its wrapper
      # and through libcuda's own export); bare: the method's noise
      timeout "${GS_PERCALL_TIMEOUT:-240}" python3 scripts/bench_percall.py --ab "${GS_AB_ROUNDS:-2000}" \
        --reps "${GS_PERCALL_REPS:-5}" --configs bare,light,light-sampled \
        --ops sync,h2d_pinned,memset,graph1,graph128,kernel >"$OUT/percall_ab.jsonl" 2>"$OUT/percall_ab.err";;
    wait)
      for i in $(seq 1 100); do [ -f /tmp/eng/ready ] && break; sleep 3; done
      tail -3 /tmp/eng-build.log > "$OUT/eng-build.tail";;
    llama)
      for i in $(seq 1 60); do [ -f /tmp/eng/ready ] && break; sleep 5; done
      tail -3 /tmp/eng-build.log > "$OUT/eng-build.tail"
      timeout 300 python3 scripts/interpose_census.py --out /tmp/census --workloads "" \
        --clients "${GS_CENSUS_CLIENTS:-1}" --n-predict 256 --llama-server /tmp/eng/build/bin/llama-server \
        --model /tmp/eng/tiny.gguf >>"$OUT/census.jsonl" 2>>"$OUT/census.err";;
    findings)
      for i in $(seq 1 60); do [ -f /tmp/eng/ready ] && break; sleep 5; done
      mkdir -p /tmp/cases
      timeout "${GS_FINDINGS_TIMEOUT:-300}" python3 scripts/record_findings_cases.py \
        --llama-server /tmp/eng/build/bin/llama-server --model /tmp/eng/tiny.gguf --out /tmp/cases \
        >"$OUT/cases.jsonl" 2>"$OUT/cases.err"
      tar czf "$OUT/cases.tgz" -C /tmp cases;;
    e2e)
      model=${GS_E2E_MODEL:-tiny}
      for i in $(seq 1 100); do [ -f /tmp/eng/ready ] && { [ "$model" = tiny ] || [ -f /tmp/eng/big-ready ]; } && break
        sleep 3; done
      modes=${GS_E2E_MODES:-bare,bare2,light,graph,off}
      anchor=()
      if [ "${GS_E2E_ANCHOR:-1}" = 1 ] && [ -x /tmp/anchor/bin/graphsignal-run ]; then
        case ",$modes," in *,anchor,*) ;; *) modes=$modes,anchor ;; esac  # named or not, it runs once
        anchor=(--run "anchor=env PYTHONPATH=/tmp/anchor /tmp/anchor/bin/graphsignal-run --listen-port {port}")
      fi
      timeout "${GS_E2E_TIMEOUT:-560}" python3 scripts/engine_e2e.py --llama-server /tmp/eng/build/bin/llama-server \
        --model "/tmp/eng/$model.gguf" --modes "$modes" "${anchor[@]}" \
        --clients "${GS_E2E_CLIENTS:-1,4}" --reps "${GS_E2E_REPS:-8}" --duration "${GS_E2E_DURATION:-3}" --warmup 1 \
        --final-scrape "${GS_E2E_FINAL_SCRAPE:-last}" \
        --deadline "${GS_E2E_DEADLINE:-540}" --out "/tmp/e2e-$model" >>"$OUT/e2e-$model.jsonl" 2>>"$OUT/e2e.err";;
  esac
done
tail -c 1500 /tmp/eng-build.log 2>/dev/null | tail -3
echo "== done $(date +%T)"
