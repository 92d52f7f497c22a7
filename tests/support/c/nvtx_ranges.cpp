// A program that only calls NVTX (no CUDA): built with NVTX v3's header
// from the toolkit or the nvidia-nvtx wheel, it reaches graphsignal's
// library through NVTX_INJECTION64_PATH, as any NVTX-annotated program
// does. It does a known number of everything (tests/integration/
// test_nvtx_injection.py holds the library to it) and prints, as one JSON
// line, what it did and the wall time it measured around its timed ranges.
//
//   nvtx_ranges all [US]  everything below ("forward" sleeps US microseconds, default 2000)
#include <nvtx3/nvToolsExt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

static uint64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, nullptr);
}

static nvtxEventAttributes_t ascii(const char* s) {
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof a);
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = s;
  return a;
}

int main(int argc, char** argv) {
  const long forward_us = argc > 2 ? atol(argv[2]) : 2000;

  nvtxInitialize(nullptr);  // NVTX loads the library now, not inside the first timed range

  // 1. nested push/pop in the default domain, timed from outside
  const int steps = 40;
  uint64_t step_ns = 0, forward_ns = 0, backward_ns = 0;
  for (int i = 0; i < steps; i++) {
    uint64_t a = now_ns();
    nvtxRangePushA("step");
    uint64_t b = now_ns();
    nvtxRangePushA("forward");
    sleep_us(forward_us);
    nvtxRangePop();
    uint64_t c = now_ns();
    nvtxEventAttributes_t back = ascii("backward");
    nvtxRangePushEx(&back);
    sleep_us(1000);
    nvtxRangePop();
    uint64_t d = now_ns();
    nvtxRangePop();
    uint64_t e = now_ns();
    step_ns += e - a, forward_ns += c - b, backward_ns += d - c;
  }

  // 2. a domain of its own: registered strings, Unicode, no message
  nvtxDomainHandle_t dom = nvtxDomainCreateA("mydomain");
  nvtxDomainHandle_t again = nvtxDomainCreateA("mydomain");  // the same handle
  nvtxStringHandle_t reg = nvtxDomainRegisterStringA(dom, "registered");
  const int dom_ranges = 30;
  for (int i = 0; i < dom_ranges; i++) {
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = reg;
    nvtxDomainRangePushEx(dom, &a);
    nvtxEventAttributes_t w = a;
    w.messageType = NVTX_MESSAGE_TYPE_UNICODE;
    w.message.unicode = L"wide \u00fc\u4e2d";
    nvtxDomainRangePushEx(again, &w);
    nvtxEventAttributes_t none = a;
    none.messageType = NVTX_MESSAGE_UNKNOWN;
    nvtxDomainRangePushEx(dom, &none);
    nvtxDomainRangePop(dom);
    nvtxDomainRangePop(dom);
    nvtxDomainRangePop(dom);
  }
  // domains interleaved on one thread: each pop takes its own domain's range
  const int interleaved = 10;
  for (int i = 0; i < interleaved; i++) {
    nvtxRangePushA("A");
    nvtxEventAttributes_t x = ascii("X");
    nvtxDomainRangePushEx(dom, &x);
    nvtxRangePop();          // A, though X was pushed after it
    nvtxDomainRangePop(dom);  // X
  }

  // 3. start/end ranges, ended on another thread
  const int io = 40;
  std::vector<nvtxRangeId_t> ids;
  std::atomic<bool> started{false};
  std::thread ender([&ids, &started] {  // running before the ranges start: they do not time a thread's creation
    while (!started.load()) std::this_thread::yield();
    for (nvtxRangeId_t id : ids) nvtxRangeEnd(id);
  });
  for (int i = 0; i < io; i++) ids.push_back(nvtxRangeStartA("io"));
  started.store(true);
  ender.join();
  nvtxRangeEnd(ids[0]);             // ended already
  nvtxRangeEnd(0x7777777700000005ull);  // never started
  nvtxRangeEnd(0xFFFFFFFFFFFF0000ull);  // not even a slot

  // 4. marks
  for (int i = 0; i < 7; i++) nvtxMarkA("tick");
  for (int i = 0; i < 3; i++) {
    nvtxEventAttributes_t m = ascii("dom-tick");
    nvtxDomainMarkEx(dom, &m);
  }

  // 5. threads
  const int threads = 8, per_thread = 1000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; t++) {
    pool.emplace_back([] {
      for (int i = 0; i < per_thread; i++) {
        nvtxRangePushA("worker");
        nvtxRangePushA("task");
        nvtxRangePop();
        nvtxRangePop();
      }
    });
  }
  for (auto& t : pool) t.join();
  // short-lived threads, a few at a time: their state is reused, their counts kept
  const int churn_threads = 200, churn_ranges = 10;
  for (int t = 0; t < churn_threads; t += 4) {
    std::vector<std::thread> batch;
    for (int k = 0; k < 4; k++)
      batch.emplace_back([] {
        for (int i = 0; i < churn_ranges; i++) {
          nvtxRangePushA("churn");
          nvtxRangePop();
        }
      });
    for (auto& b : batch) b.join();
  }
  // a thread that ends with a range open
  std::thread leaver([] { nvtxRangePushA("left-in-thread"); });
  leaver.join();

  // 6. unbalanced pops
  const int unbalanced = 5;
  for (int i = 0; i < unbalanced; i++) nvtxRangePop();

  // 7. a huge name, cut
  std::string huge(10000, 'h');
  for (int i = 0; i < 3; i++) {
    nvtxRangePushA(huge.c_str());
    nvtxRangePop();
  }

  // 8. deep nesting: 150 levels (128 tracked), paths cut at 16 levels
  const int deep = 150;
  for (int i = 0; i < deep; i++) nvtxRangePushA("d");
  for (int i = 0; i < deep; i++) nvtxRangePop();

  // 9. left open at exit: two pushes and a start (before the flood: their names fit the cap)
  nvtxRangePushA("open-at-exit");
  nvtxRangePushA("open-at-exit-inner");
  nvtxRangeStartA("open-start");

  // 10. a flood of distinct names, in a domain of its own
  nvtxDomainHandle_t flood = nvtxDomainCreateA("flood");
  const int flood_names = 5000;
  char name[32];
  for (int i = 0; i < flood_names; i++) {
    snprintf(name, sizeof name, "n%d", i);
    nvtxEventAttributes_t a = ascii(name);
    nvtxDomainRangePushEx(flood, &a);
    nvtxDomainRangePop(flood);
  }

  printf("{\"pid\": %d, \"forward_us\": %ld, \"steps\": %d, \"step_ns\": %llu, \"forward_ns\": %llu, \"backward_ns\": %llu, "
         "\"dom_ranges\": %d, \"interleaved\": %d, \"io\": %d, \"bad_ends\": 3, \"marks\": 7, \"dom_marks\": 3, "
         "\"threads\": %d, \"per_thread\": %d, \"churn\": %d, \"unbalanced\": %d, \"huge\": 3, \"deep\": %d, "
         "\"flood\": %d, \"open_at_exit\": 4}\n",
         static_cast<int>(getpid()), forward_us, steps, static_cast<unsigned long long>(step_ns),
         static_cast<unsigned long long>(forward_ns), static_cast<unsigned long long>(backward_ns), dom_ranges,
         interleaved, io, threads, per_thread, churn_threads * churn_ranges, unbalanced, deep, flood_names);
  fflush(stdout);
  return 0;
}
