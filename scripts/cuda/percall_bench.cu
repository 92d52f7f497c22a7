// What one CUDA call costs, per kind of call: the per-call benchmark of
// scripts/bench_percall.py (which runs it bare, under minimal CUPTI
// injections and under graphsignal's library, interleaved).
//
//   percall_bench [--ops sync,h2d_pinned,...] [--scale N] [--settle-ms N]   one JSON line per op
//   percall_bench --exact                                   known counts of everything, one JSON line
//
// Timed ops (each after a warm-up of a tenth of its calls):
//   sync          cudaStreamSynchronize on an idle stream
//   h2d_pinned    cudaMemcpyAsync of 64 bytes host->device from pinned memory (a sync every 64)
//   h2d_pageable  the same from pageable memory
//   d2h_pinned    64 bytes device->host into pinned memory (a sync every 64)
//   d2h_pageable  the same into pageable memory
//   memset        cudaMemsetAsync of 64 bytes (a sync every 64)
//   graph1        cudaGraphLaunch of a 1-kernel graph (a sync every 64)
//   graph128      cudaGraphLaunch of a 128-kernel graph (a sync every 64)
//   kernel        an eager one-block empty kernel (a sync every 1024)
//   nvtx_pushpop  nvtxRangePushA + nvtxRangePop (one range)
//   nvtx_startend nvtxRangeStartA + nvtxRangeEnd (one range)
//   nvtx_kernel   the eager kernel launched inside an open NVTX range (what
//                 GPU time per range, GRAPHSIGNAL_NVTX=gpu, adds per launch)
//   nvtx_kernel_outside  the eager kernel outside any range, after one
//                 (GRAPHSIGNAL_NVTX=gpu hooks launches from the first range on)
//   graph128_sync, kernel_sync   graph128 / kernel, each followed by
//                 cudaStreamSynchronize: the latency of one launch to its
//                 end, as a decode step waits for it (GPU-side costs show)
// us: wall time of the loop per call (the periodic syncs included);
// api_us: mean time spent inside the call itself. --settle-ms: before a
// graph op is timed, it runs for that long (a profiler that decides how to
// time graphs at the first launches, as graphsignal's does, has decided).
//
// --exact performs each kind of call a known number of times (runtime and
// driver API, copies captured into graphs that must not count as copies,
// the same graph captured twice) and prints what it did, for the exactness
// tests (tests/gpu/test_cupti_gpu.py).
//
// --ab (with --ops among sync, h2d_pinned, memset, graph1, graph128,
// kernel): what a driver interposer adds per call, measured inside one
// process. Each op is called through the driver entry point the runtime
// hands out (cudaGetDriverEntryPointByVersion: an interposer's wrapper
// where one is preloaded) and through libcuda's own export (its address
// read from libcuda's ELF symbol table, never through dlsym, which an
// interposer answers), in alternating blocks of calls (the order swapped
// every round; the async ops' syncs outside the timed part). One JSON line
// per op: the medians of both, and of the rounds' differences (added_ns).
// Run bare, both are the same function: added_ns is the method's noise.
//
// --nvtx-exact launches known kernels inside nested NVTX ranges, on two
// threads, through the runtime, the driver and a graph, and prints what it
// did (tests/gpu/test_nvtx_gpu.py).
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

__global__ void gs_percall_empty() {}
__global__ void gs_exact_kernel(int* p) {
  if (p && threadIdx.x == 1024) *p = 0;  // never true: the kernel must not be optimized to nothing observable
}
__global__ void gs_other_kernel(int* p) {
  if (p && threadIdx.x == 1024) *p = 1;
}
// --nvtx-exact: one kernel per range, so a range's GPU time is its kernel's
__global__ void gs_nvtx_outer(int* p) {
  if (p && threadIdx.x == 1024) *p = 2;
}
__global__ void gs_nvtx_inner(int* p) {
  if (p && threadIdx.x == 1024) *p = 3;
}
__global__ void gs_nvtx_graph(int* p) {
  if (p && threadIdx.x == 1024) *p = 4;
}
__global__ void gs_nvtx_thread(int* p) {
  if (p && threadIdx.x == 1024) *p = 5;
}
__global__ void gs_nvtx_outside(int* p) {
  if (p && threadIdx.x == 1024) *p = 6;
}

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
      exit(2);                                                                                \
    }                                                                                         \
  } while (0)
#define CU(x)                                                                                 \
  do {                                                                                        \
    CUresult r_ = (x);                                                                        \
    if (r_ != CUDA_SUCCESS) {                                                                 \
      fprintf(stderr, "%s:%d: %s: CUresult %d\n", __FILE__, __LINE__, #x, (int)r_);           \
      exit(2);                                                                                \
    }                                                                                         \
  } while (0)

using Clock = std::chrono::steady_clock;

static double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Ctx {
  cudaStream_t s;
  void* dev;
  void* pinned;
  void* pageable;
  cudaGraphExec_t g1, g128;
};

static cudaGraphExec_t make_graph(cudaStream_t s, int kernels) {
  cudaGraph_t g;
  cudaGraphExec_t e;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kernels; i++) gs_percall_empty<<<1, 1, 0, s>>>();
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&e, g, 0));
  CK(cudaGraphDestroy(g));
  return e;
}

// One call of `op`; false for an unknown op.
static inline bool call(const std::string& op, Ctx& c) {
  static const std::string kSync = "_sync";
  if (op.size() > kSync.size() && op.compare(op.size() - kSync.size(), kSync.size(), kSync) == 0) {
    if (!call(op.substr(0, op.size() - kSync.size()), c)) return false;
    CK(cudaStreamSynchronize(c.s));
    return true;
  }
  if (op == "sync") CK(cudaStreamSynchronize(c.s));
  else if (op == "h2d_pinned") CK(cudaMemcpyAsync(c.dev, c.pinned, 64, cudaMemcpyHostToDevice, c.s));
  else if (op == "h2d_pageable") CK(cudaMemcpyAsync(c.dev, c.pageable, 64, cudaMemcpyHostToDevice, c.s));
  else if (op == "d2h_pinned") CK(cudaMemcpyAsync(c.pinned, c.dev, 64, cudaMemcpyDeviceToHost, c.s));
  else if (op == "d2h_pageable") CK(cudaMemcpyAsync(c.pageable, c.dev, 64, cudaMemcpyDeviceToHost, c.s));
  else if (op == "memset") CK(cudaMemsetAsync(c.dev, 0, 64, c.s));
  else if (op == "graph1") CK(cudaGraphLaunch(c.g1, c.s));
  else if (op == "graph128") CK(cudaGraphLaunch(c.g128, c.s));
  else if (op == "kernel" || op == "nvtx_kernel" || op == "nvtx_kernel_outside") gs_percall_empty<<<1, 1, 0, c.s>>>();
  else if (op == "nvtx_pushpop") {
    nvtxRangePushA("percall");
    nvtxRangePop();
  } else if (op == "nvtx_startend") nvtxRangeEnd(nvtxRangeStartA("percall"));
  else return false;
  return true;
}

static void timed(const std::string& op, int calls, Ctx& c, int settle_ms) {
  bool launches = op == "kernel" || op == "nvtx_kernel" || op == "nvtx_kernel_outside";
  int every = launches ? 1024 : 64;
  if (op == "sync" || op == "nvtx_pushpop" || op == "nvtx_startend" || op.find("_sync") != std::string::npos)
    every = 1 << 30;
  if (op == "nvtx_kernel") nvtxRangePushA("percall-launches");  // open around every timed launch
  if (op == "nvtx_kernel_outside") {
    nvtxRangePushA("percall-first");  // a range has been: launches are hooked from now on (GRAPHSIGNAL_NVTX=gpu)
    nvtxRangePop();
  }
  if (settle_ms > 0 && op.rfind("graph", 0) == 0) {
    auto until = Clock::now() + std::chrono::milliseconds(settle_ms);
    for (int i = 0; Clock::now() < until; i++) {
      call(op, c);
      if ((i + 1) % every == 0) CK(cudaStreamSynchronize(c.s));
    }
    CK(cudaStreamSynchronize(c.s));
  }
  auto run = [&](int n, double* inside) {
    double in = 0;
    auto t0 = Clock::now();
    for (int i = 0; i < n; i++) {
      auto a = Clock::now();
      call(op, c);
      in += seconds(a, Clock::now());
      if ((i + 1) % every == 0) CK(cudaStreamSynchronize(c.s));
    }
    CK(cudaStreamSynchronize(c.s));
    if (inside) *inside = in;
    return seconds(t0, Clock::now());
  };
  run(calls / 10 + 1, nullptr);
  double inside = 0;
  double wall = run(calls, &inside);
  if (op == "nvtx_kernel") nvtxRangePop();
  printf("{\"op\": \"%s\", \"calls\": %d, \"us\": %.4f, \"api_us\": %.4f}\n", op.c_str(), calls, 1e6 * wall / calls,
         1e6 * inside / calls);
  fflush(stdout);
}

// ---- --ab: the interposer's cost per call, inside one process ----

struct LibFind {
  char path[4096];
  ElfW(Addr) base;
  bool found;
};

static int find_libcuda(struct dl_phdr_info* info, size_t, void* data) {
  LibFind* f = (LibFind*)data;
  if (info->dlpi_name && strstr(info->dlpi_name, "libcuda.so")) {
    snprintf(f->path, sizeof f->path, "%s", info->dlpi_name);
    f->base = info->dlpi_addr;
    f->found = true;
    return 1;
  }
  return 0;
}

// libcuda's own export `name`: from the loaded libcuda's file, its dynamic
// symbol table, plus where it is mapped (never dlsym: an interposer answers it).
static void* libcuda_export(const char* name) {
  LibFind f = {};
  dl_iterate_phdr(find_libcuda, &f);
  if (!f.found) return nullptr;
  int fd = open(f.path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(ElfW(Ehdr))) {
    close(fd);
    return nullptr;
  }
  void* m = mmap(nullptr, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return nullptr;
  const unsigned char* b = (const unsigned char*)m;
  const ElfW(Ehdr)* eh = (const ElfW(Ehdr)*)b;
  size_t size = (size_t)st.st_size;
  void* out = nullptr;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_shoff &&
      eh->e_shoff + (size_t)eh->e_shnum * sizeof(ElfW(Shdr)) <= size) {
    const ElfW(Shdr)* sh = (const ElfW(Shdr)*)(b + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum && !out; i++) {
      if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh->e_shnum) continue;
      const ElfW(Shdr)& strs = sh[sh[i].sh_link];
      if (sh[i].sh_offset + sh[i].sh_size > size || strs.sh_offset + strs.sh_size > size) continue;
      const ElfW(Sym)* sym = (const ElfW(Sym)*)(b + sh[i].sh_offset);
      const char* str = (const char*)(b + strs.sh_offset);
      size_t n = sh[i].sh_size / sizeof(ElfW(Sym));
      for (size_t k = 0; k < n; k++) {
        if (sym[k].st_shndx == SHN_UNDEF || !sym[k].st_value || sym[k].st_name >= strs.sh_size) continue;
        if (!strcmp(str + sym[k].st_name, name)) {
          out = (void*)(f.base + sym[k].st_value);
          break;
        }
      }
    }
  }
  munmap(m, size);
  return out;
}

typedef CUresult (*stream_fn)(CUstream);
typedef CUresult (*htod_async_fn)(CUdeviceptr, const void*, size_t, CUstream);
typedef CUresult (*set8_async_fn)(CUdeviceptr, unsigned char, size_t, CUstream);
typedef CUresult (*graph_launch_fn)(CUgraphExec, CUstream);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);

// ns per call of n calls of `op` through `fn`; the stream synchronized after, untimed
static double ab_block(const std::string& op, void* fn, Ctx& c, CUfunction kf, stream_fn real_sync, int n,
                       int* bad) {
  int r = 0;
  auto t0 = Clock::now();
  if (op == "sync") {
    stream_fn f = (stream_fn)fn;
    for (int i = 0; i < n; i++) r |= f((CUstream)c.s);
  } else if (op == "h2d_pinned") {
    htod_async_fn f = (htod_async_fn)fn;
    for (int i = 0; i < n; i++) r |= f((CUdeviceptr)c.dev, c.pinned, 64, (CUstream)c.s);
  } else if (op == "memset") {
    set8_async_fn f = (set8_async_fn)fn;
    for (int i = 0; i < n; i++) r |= f((CUdeviceptr)c.dev, 0, 64, (CUstream)c.s);
  } else if (op == "graph1" || op == "graph128") {
    graph_launch_fn f = (graph_launch_fn)fn;
    CUgraphExec e = (CUgraphExec)(op == "graph1" ? c.g1 : c.g128);
    for (int i = 0; i < n; i++) r |= f(e, (CUstream)c.s);
  } else {
    launch_fn f = (launch_fn)fn;
    for (int i = 0; i < n; i++) r |= f(kf, 1, 1, 1, 1, 1, 1, 0, (CUstream)c.s, nullptr, nullptr);
  }
  double ns = 1e9 * seconds(t0, Clock::now()) / n;
  real_sync((CUstream)c.s);
  *bad |= r;
  return ns;
}

static double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double quantile_of(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[(size_t)(q * (v.size() - 1) + 0.5)];
}

static int ab(const std::string& ops, Ctx& c, int rounds) {
  static const struct { const char* op; const char* sym; int n; } kOps[] = {
      {"sync", "cuStreamSynchronize", 64},   {"h2d_pinned", "cuMemcpyHtoDAsync", 64},
      {"memset", "cuMemsetD8Async", 64},     {"graph1", "cuGraphLaunch", 32},
      {"graph128", "cuGraphLaunch", 8},      {"kernel", "cuLaunchKernel", 64}};
  stream_fn real_sync = (stream_fn)libcuda_export("cuStreamSynchronize");
  if (!real_sync) {
    fprintf(stderr, "percall_bench --ab: libcuda's exports could not be read\n");
    return 3;
  }
  CUfunction kf = nullptr;
  CK(cudaGetFuncBySymbol((cudaFunction_t*)&kf, (const void*)gs_percall_empty));
  for (const auto& o : kOps) {
    if (("," + ops + ",").find("," + std::string(o.op) + ",") == std::string::npos) continue;
    void* wrapped = nullptr;
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion(o.sym, &wrapped, 12000, cudaEnableDefault, &q));
    std::string real_name = o.sym;
    if (real_name == "cuMemcpyHtoDAsync") real_name += "_v2";
    void* real = libcuda_export(real_name.c_str());
    if (!wrapped || !real) {
      fprintf(stderr, "percall_bench --ab: no %s (runtime %p, libcuda %p)\n", o.sym, wrapped, real);
      return 3;
    }
    std::string op = o.op;
    int bad = 0;
    // settle: both paths warm, a sampling interposer past its first launches
    for (int i = 0; i < 50; i++) {
      ab_block(op, wrapped, c, kf, real_sync, o.n, &bad);
      ab_block(op, real, c, kf, real_sync, o.n, &bad);
    }
    std::vector<double> w, r, d;
    for (int i = 0; i < rounds; i++) {
      double a, b;
      if (i % 2) {
        b = ab_block(op, real, c, kf, real_sync, o.n, &bad);
        a = ab_block(op, wrapped, c, kf, real_sync, o.n, &bad);
      } else {
        a = ab_block(op, wrapped, c, kf, real_sync, o.n, &bad);
        b = ab_block(op, real, c, kf, real_sync, o.n, &bad);
      }
      w.push_back(a);
      r.push_back(b);
      d.push_back(a - b);
    }
    if (bad) {
      fprintf(stderr, "percall_bench --ab: %s failed\n", o.sym);
      return 3;
    }
    printf("{\"op\": \"ab:%s\", \"rounds\": %d, \"calls_per_block\": %d, \"same_function\": %s, "
           "\"wrapped_ns\": %.1f, \"real_ns\": %.1f, \"added_ns\": %.1f, \"added_p25_ns\": %.1f, "
           "\"added_p75_ns\": %.1f}\n",
           o.op, rounds, o.n, wrapped == real ? "true" : "false", median_of(w), median_of(r), median_of(d),
           quantile_of(d, 0.25), quantile_of(d, 0.75));
    fflush(stdout);
  }
  return 0;
}

static int exact() {
  // Counts of what this function does; the library must report exactly these.
  const int eager = 3000, syncs = 40, copies = 50, memsets = 30, r1 = 200, r2 = 150, r3 = 100, drv = 20;
  cudaStream_t s, other;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  int* dev = nullptr;
  void *dev2 = nullptr, *pinned = nullptr;
  CK(cudaMalloc((void**)&dev, 1 << 20));
  CK(cudaMalloc(&dev2, 1 << 20));
  CK(cudaHostAlloc(&pinned, 1 << 20, cudaHostAllocDefault));
  std::vector<char> pageable(1 << 20, 1);
  int n_stream = 0, n_context = 0, n_event = 0, n_wait = 0;

  for (int i = 0; i < eager; i++) gs_exact_kernel<<<1, 32, 0, s>>>(dev);
  CK(cudaStreamSynchronize(s)); n_stream++;

  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  for (int i = 0; i < syncs; i++) {
    CK(cudaStreamSynchronize(s)); n_stream++;
    CK(cudaDeviceSynchronize()); n_context++;
    CK(cudaEventRecord(ev, s));
    CK(cudaEventSynchronize(ev)); n_event++;
    CK(cudaStreamWaitEvent(other, ev, 0)); n_wait++;
  }
  // bytes by (kind, host memory)
  long long h2d_pinned = 0, h2d_pageable = 0, d2h_pinned = 0, d2h_pageable = 0, d2d = 0;
  int n_h2d_pinned = 0, n_h2d_pageable = 0, n_d2h_pinned = 0, n_d2h_pageable = 0, n_d2d = 0;
  for (int i = 0; i < copies; i++) {
    size_t b = 64 + i;
    CK(cudaMemcpyAsync(dev, pinned, b, cudaMemcpyHostToDevice, s)); h2d_pinned += b; n_h2d_pinned++;
    CK(cudaMemcpyAsync(pinned, dev, 2 * b, cudaMemcpyDeviceToHost, s)); d2h_pinned += 2 * b; n_d2h_pinned++;
    CK(cudaMemcpyAsync(dev, pageable.data(), 3 * b, cudaMemcpyHostToDevice, s)); h2d_pageable += 3 * b; n_h2d_pageable++;
    CK(cudaMemcpyAsync(pageable.data(), dev, 4 * b, cudaMemcpyDeviceToHost, s)); d2h_pageable += 4 * b; n_d2h_pageable++;
    CK(cudaMemcpyAsync(dev2, dev, 5 * b, cudaMemcpyDeviceToDevice, s)); d2d += 5 * b; n_d2d++;
  }
  for (int i = 0; i < 10; i++) {
    CK(cudaMemcpy(dev, pinned, 4096, cudaMemcpyHostToDevice)); h2d_pinned += 4096; n_h2d_pinned++;
    CK(cudaMemcpyAsync(dev, pinned, 1000, cudaMemcpyDefault, s)); h2d_pinned += 1000; n_h2d_pinned++;
    CK(cudaMemcpy2DAsync(dev, 256, pinned, 128, 128, 8, cudaMemcpyHostToDevice, s)); h2d_pinned += 1024; n_h2d_pinned++;
  }
  // the driver API, as a program using it directly
  CUstream cs = reinterpret_cast<CUstream>(s);
  for (int i = 0; i < drv; i++) {
    CU(cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(dev), pinned, 512, cs)); h2d_pinned += 512; n_h2d_pinned++;
    CU(cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(dev2), 7, 256, cs));
    CU(cuStreamSynchronize(cs)); n_stream++;
  }
  long long memset_bytes = 256 * 4 * drv;
  int n_memset = drv;
  for (int i = 0; i < memsets; i++) {
    CK(cudaMemsetAsync(dev, i, 4096, s)); memset_bytes += 4096; n_memset++;
    CK(cudaMemset(dev2, i, 2048)); memset_bytes += 2048; n_memset++;
  }
  CK(cudaStreamSynchronize(s)); n_stream++;

  // graphs: one step captured twice (re-captures fold into one name), one other;
  // the copy and the memset inside the capture run only as graph nodes
  auto capture = [&](bool step) {
    cudaGraph_t g;
    cudaGraphExec_t e;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    if (step) {
      for (int i = 0; i < 8; i++) gs_exact_kernel<<<1, 32, 0, s>>>(dev);
      CK(cudaMemcpyAsync(dev, pinned, 64, cudaMemcpyHostToDevice, s));
      CK(cudaMemsetAsync(dev2, 0, 64, s));
    } else {
      for (int i = 0; i < 3; i++) gs_other_kernel<<<1, 32, 0, s>>>(dev);
    }
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&e, g, 0));
    CK(cudaGraphDestroy(g));
    return e;
  };
  cudaGraphExec_t e1 = capture(true), e2 = capture(true), e3 = capture(false);
  for (int i = 0; i < r1; i++) CK(cudaGraphLaunch(e1, s));
  for (int i = 0; i < r2; i++) CK(cudaGraphLaunch(e2, s));
  for (int i = 0; i < r3; i++) CK(cudaGraphLaunch(e3, s));
  CK(cudaStreamSynchronize(s)); n_stream++;
  CK(cudaDeviceSynchronize()); n_context++;
  printf("{\"pid\": %d, \"eager_kernels\": %d, \"step_replays\": %d, \"step_captures\": 2, \"step_nodes\": 10, "
         "\"step_kernels\": 8, \"other_replays\": %d, \"other_nodes\": 3, "
         "\"syncs\": {\"stream\": %d, \"context\": %d, \"event\": %d, \"stream_wait_event\": %d}, "
         "\"copies\": {\"host_to_device pinned\": [%d, %lld], \"host_to_device pageable\": [%d, %lld], "
         "\"device_to_host pinned\": [%d, %lld], \"device_to_host pageable\": [%d, %lld], "
         "\"device_to_device\": [%d, %lld]}, \"memsets\": [%d, %lld]}\n",
         (int)getpid(), eager, r1 + r2, r3, n_stream, n_context, n_event, n_wait, n_h2d_pinned, h2d_pinned,
         n_h2d_pageable, h2d_pageable, n_d2h_pinned, d2h_pinned, n_d2h_pageable, d2h_pageable, n_d2d, d2d, n_memset,
         memset_bytes);
  fflush(stdout);
  return 0;
}

static int nvtx_exact() {
  const int outer = 300, inner_rt = 200, inner_drv = 100, replays = 40, graph_nodes = 6, thread_k = 150, outside = 70;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* dev = nullptr;
  CK(cudaMalloc((void**)&dev, 4096));
  // the graph, captured before any range (its kernels are its own: counted with its replays)
  cudaGraph_t g;
  cudaGraphExec_t e;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < graph_nodes; i++) gs_nvtx_graph<<<1, 32, 0, s>>>(dev);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&e, g, 0));
  CK(cudaGraphDestroy(g));
  cudaFunction_t f = nullptr;
  CK(cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(gs_nvtx_inner)));
  CK(cudaStreamSynchronize(s));
  nvtxInitialize(nullptr);  // NVTX attaches its tool now, not inside the timed range

  auto t0 = Clock::now();
  nvtxRangePushA("outer");
  for (int i = 0; i < outer; i++) gs_nvtx_outer<<<1, 32, 0, s>>>(dev);
  nvtxDomainHandle_t dom = nvtxDomainCreateA("gs-exact");
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof a);
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = "inner";
  nvtxDomainRangePushEx(dom, &a);  // another domain: innermost on the thread all the same
  nvtxRangePushA("inner");
  for (int i = 0; i < inner_rt; i++) gs_nvtx_inner<<<1, 32, 0, s>>>(dev);
  void* args[] = {&dev};
  for (int i = 0; i < inner_drv; i++)
    CU(cuLaunchKernel(reinterpret_cast<CUfunction>(f), 1, 1, 1, 32, 1, 1, 0, reinterpret_cast<CUstream>(s), args,
                      nullptr));
  for (int i = 0; i < replays; i++) CK(cudaGraphLaunch(e, s));
  nvtxRangePop();
  nvtxDomainRangePop(dom);
  CK(cudaStreamSynchronize(s));
  nvtxRangePop();
  double outer_s = seconds(t0, Clock::now());
  for (int i = 0; i < outside; i++) gs_nvtx_outside<<<1, 32, 0, s>>>(dev);
  std::thread other([&] {
    nvtxRangePushA("thread");
    for (int i = 0; i < thread_k; i++) gs_nvtx_thread<<<1, 32, 0, s>>>(dev);
    CK(cudaStreamSynchronize(s));
    nvtxRangePop();
  });
  other.join();
  CK(cudaDeviceSynchronize());
  printf("{\"pid\": %d, \"outer\": %d, \"inner_runtime\": %d, \"inner_driver\": %d, \"replays\": %d, "
         "\"graph_nodes\": %d, \"thread\": %d, \"outside\": %d, \"outer_wall_ns\": %.0f}\n",
         (int)getpid(), outer, inner_rt, inner_drv, replays, graph_nodes, thread_k, outside, outer_s * 1e9);
  fflush(stdout);
  return 0;
}

int main(int argc, char** argv) {
  std::string ops = "sync,h2d_pinned,h2d_pageable,d2h_pinned,d2h_pageable,memset,graph1,graph128,kernel";
  int scale = 1, settle_ms = 0, ab_rounds = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--exact")) return exact();
    if (!strcmp(argv[i], "--nvtx-exact")) return nvtx_exact();
    if (!strcmp(argv[i], "--ops") && i + 1 < argc) ops = argv[++i];
    else if (!strcmp(argv[i], "--scale") && i + 1 < argc) scale = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--settle-ms") && i + 1 < argc) settle_ms = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--ab")) ab_rounds = 2000;
    else if (!strcmp(argv[i], "--ab-rounds") && i + 1 < argc) ab_rounds = atoi(argv[++i]);
  }
  CK(cudaSetDevice(0));
  Ctx c;
  CK(cudaStreamCreateWithFlags(&c.s, cudaStreamNonBlocking));
  CK(cudaMalloc(&c.dev, 1 << 20));
  CK(cudaHostAlloc(&c.pinned, 1 << 20, cudaHostAllocDefault));
  c.pageable = malloc(1 << 20);
  memset(c.pageable, 0, 1 << 20);
  c.g1 = make_graph(c.s, 1);
  c.g128 = make_graph(c.s, 128);
  CK(cudaDeviceSynchronize());
  if (ab_rounds > 0) return ab(ops, c, ab_rounds);
  size_t at = 0;
  while (at <= ops.size()) {
    size_t end = ops.find(',', at);
    std::string op = ops.substr(at, end == std::string::npos ? std::string::npos : end - at);
    int n = 10000;
    if (op == "h2d_pageable" || op == "d2h_pageable" || op == "graph1") n = 5000;
    if (op == "graph128" || op == "graph128_sync") n = 500;
    if (op == "kernel_sync") n = 5000;
    if (op == "kernel" || op == "nvtx_kernel" || op == "nvtx_kernel_outside") n = 30000;
    if (op == "nvtx_pushpop" || op == "nvtx_startend") n = 200000;
    if (!op.empty()) {
      Ctx probe = c;
      if (!call(op, probe)) {
        fprintf(stderr, "unknown op %s\n", op.c_str());
        return 2;
      }
      timed(op, n * scale, c, settle_ms);
    }
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return 0;
}
