// Eager kernel launches counted by the driver's launch callbacks and timed
// from sampled activity records, instead of CUPTI tracing every launch
// (GRAPHSIGNAL_CUPTI_KERNEL_SAMPLING, graph mode of the hybrid collection).
//
// Why: with kernel tracing (CONCURRENT_KERNEL) on, CUPTI costs every eager
// launch about 2 µs of the launching thread's time; a launch callback that
// returns at once costs about a tenth of that (scripts/bench_percall.py:
// floor:kernel against floor:kernel-counted). An engine that launches
// hundreds of small kernels per decode step pays the difference on every
// step.
//
// Counting. A launch callback (cuLaunchKernel, cuLaunchKernelEx,
// cuLaunchCooperativeKernel and their _ptsz, at API exit, on success, not
// into a capturing stream) adds one to its thread's table, keyed by the
// kernel's symbol pointer (CUpti_CallbackData::symbolName) and device: no
// lock, no allocation, no CUPTI or driver call, only the owning thread
// writes (as call_tables.h). A symbol pointer seen for the first time on a
// thread is interned once (a copy of its bytes, under a lock). Counts are
// exact.
//
// Timing. Kernel tracing is switched on for the sampling windows only (the
// copy windows: GRAPHSIGNAL_CUPTI_SAMPLE_MS of every _PERIOD_MS). Every
// eager kernel record is then a sample: its duration goes into a mean per
// (symbol, device), decayed by half at each window, and never counts. At
// each flush the counts since the last one go to the ring as KERNEL_AGG
// records (flag sampled) with calls x mean; a symbol with no sample yet
// sends its calls now and its time once a window saw it (a record of time
// without calls).
//
// Checked at run time: when the next window opens, the eager kernel records
// a window produced are compared with the launches the callbacks counted
// while it was open. Records well above the counted launches mean launches
// reach the GPU by a way the callbacks do not see (an entry point not
// hooked, a CUPTI that does not call back for it): sampling ends for good,
// kernel tracing stays on, and records count again from then on (said in
// one log line). Launches counted in windows that no window's record ever
// timed are said at exit.
//
// Threads: add() on workload threads; sample()/on_window_*()/flush() on the
// collector's thread under its translate lock.
#pragma once

#include <stdint.h>

#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "name_table.h"
#include "ring_sink.h"

namespace graphsignal {
namespace cupti {

struct KernelCountStats {
  uint64_t counted = 0;      // launches counted by callbacks (flushed)
  uint64_t samples = 0;      // eager kernel records that timed them
  uint64_t untabled = 0;     // launches written one record each (a full table, too many threads)
  uint64_t symbols = 0;      // distinct symbols interned
  uint64_t untimed = 0;      // launches (flushed) whose symbol never had a sample
  uint64_t windows = 0;      // windows judged
};

class KernelCounts {
 public:
  static constexpr int kSlots = 512;       // (symbol, device) keys per thread
  static constexpr int kMaxTables = 4096;  // threads; later ones write a record per launch
  static constexpr size_t kMaxSymbols = 1 << 16;

  explicit KernelCounts(RingSink* sink) : sink_(sink) {}

  // -- workload threads -------------------------------------------------------------
  // One launch of `symbol` (the callback's symbolName; null: "<unknown kernel>") on `device`.
  void add(const char* symbol, uint16_t device);
  // Counting ended (the check failed): later launches are left to their records.
  bool counting() const { return counting_.load(std::memory_order_relaxed); }
  // Ends counting for good (the collector could not switch kernel tracing off).
  void stop() { counting_.store(false, std::memory_order_relaxed); }

  // -- the collector's thread, under its translate lock -------------------------------
  // An eager kernel record's duration while counting: a sample (the caller
  // writes nothing).
  void sample(const char* symbol, uint16_t device, uint64_t ns);
  // A window opens / closed (kernel tracing switched on / off). open judges
  // the previous window, whose records are in by then: false when they show
  // launches the callbacks did not count (counting ends; the caller keeps
  // kernel tracing on for good).
  bool on_window_open();
  void on_window_close();
  // What was counted since the last flush, into the ring (names through
  // the translator's table). `final`: at exit, says what stays untimed.
  void flush(NameTable* names, bool final);
  // Why counting ended (null: it did not).
  const char* ended_reason() const { return ended_; }

  KernelCountStats stats() const { return st_; }

 private:
  struct Slot {
    std::atomic<uintptr_t> key{0};      // symbol pointer | device << 48; 0: free
    std::atomic<const std::string*> name{nullptr};  // interned, set before the key
    std::atomic<uint64_t> calls{0};
    uint64_t sent = 0;  // the flusher's
  };
  struct Table {
    Slot slots[kSlots];
    Table* next = nullptr;
  };
  struct Mean {
    double ns = 0, n = 0;
    uint64_t cur_ns = 0, cur_n = 0;
    bool known() const { return n + static_cast<double>(cur_n) > 0; }
    double mean() const { return (ns + static_cast<double>(cur_ns)) / (n + static_cast<double>(cur_n)); }
  };
  struct Symbol {
    std::map<uint16_t, Mean> by_device;
    std::map<uint16_t, uint64_t> pending;  // calls sent without time, by device
  };

  Table* table();
  const std::string* intern(const char* symbol);  // under intern_mu_
  uint64_t counted_total();                       // sum over tables (the collector's thread)
  Symbol& symbol(const std::string& name);
  void write(uint16_t dev, const std::string& name, uint64_t calls, uint64_t ns, NameTable* names);

  RingSink* sink_;
  std::atomic<bool> counting_{true};
  std::atomic<Table*> tables_{nullptr};
  std::atomic<int> n_tables_{0};
  std::atomic<uint64_t> untabled_{0};
  std::mutex intern_mu_;
  std::unordered_map<std::string, const std::string*> interned_;
  std::deque<std::string> storage_;  // never moves its strings
  // pending one-record launches (a full table): symbol -> calls, by device
  std::mutex direct_mu_;
  std::map<std::pair<const std::string*, uint16_t>, uint64_t> direct_;

  // the collector's thread
  std::unordered_map<std::string, Symbol> symbols_;
  uint64_t window_start_counted_ = 0, window_records_ = 0, window_launches_ = 0;
  bool window_open_ = false, judge_ = false;
  const char* ended_ = nullptr;
  KernelCountStats st_;
};

}  // namespace cupti
}  // namespace graphsignal
