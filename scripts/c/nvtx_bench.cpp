// What an NVTX call costs, per kind (scripts/bench_nvtx.py runs it with no
// NVTX tool attached, and with graphsignal's library attached):
//
//   nvtx_bench N THREADS   one JSON line: ns per call, each of THREADS
//                          threads making N calls of each kind at once
//
//   push_pop_ns    nvtxRangePushA + nvtxRangePop (one range)
//   nested2_ns     two nested ranges (two pushes, two pops), per range
//   start_end_ns   nvtxRangeStartA + nvtxRangeEnd (one range)
//   push_ex_ns     nvtxDomainRangePushEx with a registered string + pop
//   mark_ns        nvtxMarkA
#include <nvtx3/nvToolsExt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atomic>
#include <thread>
#include <vector>

static uint64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

struct Times {
  double push_pop, nested2, start_end, push_ex, mark;
};

static Times one_thread(long n, nvtxDomainHandle_t dom, nvtxStringHandle_t reg) {
  Times t;
  uint64_t a = now_ns();
  for (long i = 0; i < n; i++) {
    nvtxRangePushA("bench");
    nvtxRangePop();
  }
  uint64_t b = now_ns();
  for (long i = 0; i < n; i++) {
    nvtxRangePushA("outer");
    nvtxRangePushA("inner");
    nvtxRangePop();
    nvtxRangePop();
  }
  uint64_t c = now_ns();
  for (long i = 0; i < n; i++) nvtxRangeEnd(nvtxRangeStartA("bench-io"));
  uint64_t d = now_ns();
  nvtxEventAttributes_t ev;
  memset(&ev, 0, sizeof ev);
  ev.version = NVTX_VERSION;
  ev.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  ev.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  ev.message.registered = reg;
  for (long i = 0; i < n; i++) {
    nvtxDomainRangePushEx(dom, &ev);
    nvtxDomainRangePop(dom);
  }
  uint64_t e = now_ns();
  for (long i = 0; i < n; i++) nvtxMarkA("bench-mark");
  uint64_t f = now_ns();
  t.push_pop = double(b - a) / n;
  t.nested2 = double(c - b) / (2 * n);
  t.start_end = double(d - c) / n;
  t.push_ex = double(e - d) / n;
  t.mark = double(f - e) / n;
  return t;
}

int main(int argc, char** argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  int threads = argc > 2 ? atoi(argv[2]) : 1;
  if (n <= 0 || threads <= 0) return 2;
  nvtxInitialize(nullptr);  // the tool attaches here, outside the timed loops
  nvtxDomainHandle_t dom = nvtxDomainCreateA("bench");
  nvtxStringHandle_t reg = nvtxDomainRegisterStringA(dom, "bench-registered");
  std::vector<Times> out(threads);
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; i++) {
    pool.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();  // all start together: contention is measured
      out[i] = one_thread(n, dom, reg);
    });
  }
  for (auto& t : pool) t.join();
  Times m = {0, 0, 0, 0, 0};
  for (const Times& t : out) {
    m.push_pop += t.push_pop / threads, m.nested2 += t.nested2 / threads, m.start_end += t.start_end / threads;
    m.push_ex += t.push_ex / threads, m.mark += t.mark / threads;
  }
  printf("{\"calls\": %ld, \"threads\": %d, \"push_pop_ns\": %.2f, \"nested2_ns\": %.2f, \"start_end_ns\": %.2f, "
         "\"push_ex_ns\": %.2f, \"mark_ns\": %.2f}\n",
         n, threads, m.push_pop, m.nested2, m.start_end, m.push_ex, m.mark);
  return 0;
}
