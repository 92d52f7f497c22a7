// CUDA graph replays counted by an API callback on the graph launch entry
// points (cuGraphLaunch, cuGraphLaunch_ptsz), and their GPU time estimated
// from sampled activity records, instead of CUPTI tracing every replay.
// The sampled collection of graphs (graph_sampling.h drives it; the
// activity collection does not use this class).
//
// Counting. At instantiation (api_callbacks.cpp) each executable graph is
// bound to its frame (graph_registry.h: the walked name and what one replay
// runs). A launch callback finds the executable in a lock-free open-
// addressing table and adds one to its counter: no lock, no allocation, no
// CUPTI or driver call on the launch path. Replay counts are exact.
//
// Which launches are counted, and which records only time them: the
// correlation id. CUPTI gives a graph launch callback and the records the
// launch produces (GRAPH_TRACE, and the kernel records of its nodes) the
// same correlation id, so one rule on that id splits every launch into
// "counted here" (its records are samples: they time, never count) or "left
// to its records" (written as before, exact), without a race between the
// two sides: accounting covers the ids after a boundary B (set when
// sampling starts), and up to a boundary R when it stops again.
//
// Timing. Sampling windows (graph_sampling.h) switch CUPTI into the state
// whose records time the replays (graph mode: GRAPH_TRACE on; node mode:
// GRAPH_TRACE off, so kernel tracing reaches the nodes); launches while a
// window is open are marked, and the correlation ids of a window's launches
// form a range. Records in a window's range are samples: per frame (graph
// mode) or per frame and kernel symbol (node mode) their durations go into
// a mean decayed by half at each window. A record of a counted launch
// outside every window range means the quiet state did not stop CUPTI's
// records: evidence that sampling does not work here (graph_sampling.h
// reverts to tracing every replay).
//
// Estimates, written at each flush (the collector's thread):
//   graph mode  per frame and device: replays (exact) x mean replay time
//               -> GRAPHSIGNAL_REC_GRAPH_AGG, flag sampled
//   node mode   per kernel symbol and device: replays x the kernel's nodes
//               in the walked shape (exact for a static graph) x its mean
//               -> GRAPHSIGNAL_REC_KERNEL_AGG, flag sampled; an executable
//               whose kernels may differ from its walk (updated in place to
//               other kernels, node parameters or enablement set on the
//               executable, or no walk) counts by the sampled nodes per
//               replay instead, flag count_estimated too;
//               copies and memsets inside graphs likewise per replay
//               (MEMCPY_SAMPLED / MEMSET_SAMPLED with the count_estimated
//               sub bit), and so do kernel records the walk does not name
//               (a memset node run as a kernel).
// A frame with no sample yet sends its counts and its time once one comes
// (a record of time without calls); counts per replay wait for the first
// judged window (or, at exit, use what the records before sampling showed).
// A record whose graph id no frame knows (a conditional node's body graph)
// belongs to the frame of the launch with its correlation id (kept for
// this window's and the last one's launches).
//
// Threads: on_launch/bind/retire/modified on workload threads (bind and
// the rest under mu_, never on the launch path); records and windows on
// the translator's and collector's threads under data_mu_ (lock order
// mu_ then data_mu_). Tests feed it by hand (tests/support/cupti/test_shim.cpp).
#pragma once

#include <cuda.h>
#include <stdint.h>

#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "graph_registry.h"
#include "name_table.h"
#include "ring_sink.h"

namespace graphsignal {
namespace cupti {

// GRAPHSIGNAL_REC_GRAPH_AGG / _KERNEL_AGG sub flags (probe.h).
constexpr uint8_t kAggSampled = 1, kAggCountEstimated = 2;
// MEMCPY_SAMPLED / MEMSET_SAMPLED sub bit: the count is estimated too.
constexpr uint8_t kSubCountEstimated = 0x80;

struct GraphLaunchStats {
  uint64_t counted = 0;          // launches counted by callbacks (flushed)
  uint64_t unbound = 0;          // counted launches of no known executable
  uint64_t samples = 0;          // records that timed counted launches
  uint64_t unknown_samples = 0;  // window records of a graph no frame knows
  uint64_t quiet_records = 0;    // records of counted launches outside every window (evidence)
  uint64_t stray_nodes = 0;      // graph mode: node kernel records of counted launches outside windows
  uint64_t exact = 0;            // records left to count themselves (they teach the means too)
};

class GraphLaunches {
 public:
  enum class Mode : uint8_t { kGraph, kNode };
  static constexpr size_t kSlots = 1 << 14;    // executables bound at once (retired ones are reused)
  static constexpr size_t kMaxFrames = 1 << 14;
  static constexpr int kRanges = 16;           // window ranges kept for classifying late records

  GraphLaunches(RingSink* sink, GraphRegistry* registry, Mode mode);

  Mode mode() const { return mode_; }

  // -- workload threads --------------------------------------------------------
  // A successful launch of `exec` on `device` (announced already) with
  // CUPTI's correlation id. Lock-free. False when the launch is counted but
  // `exec` was never bound: the caller binds it and calls again, or counts
  // it with count_unbound.
  bool on_launch(CUgraphExec exec, uint16_t device, uint32_t corr);
  void count_unbound(uint16_t device);
  // An executable's frame (registry name) and what one replay runs (null or
  // !known: no walk). Rebinding a handle retires its previous binding.
  // `device_launch`: instantiated to be launched from the device, where no
  // callback counts its replays (node mode then traces every node).
  void bind(CUgraphExec exec, const std::string& name, const GraphShape* shape, bool device_launch = false);
  // Why sampling cannot count this process's replays (null: it can).
  const char* full_trace_reason() const { return full_trace_reason_.load(std::memory_order_acquire); }
  // cudaGraphExecUpdate: the executable's new kernels; it keeps its frame,
  // and counts by sampled windows from now on if they differ from the walk.
  // False when `exec` is not bound (the caller binds it).
  bool updated(CUgraphExec exec, const GraphShape* shape);
  // Node parameters or enablement set on the executable: its kernels are
  // no longer known from its walk.
  void modified(CUgraphExec exec);
  void retire(CUgraphExec exec);  // cuGraphExecDestroy
  // Called once, on the thread of the first launch (the collector wakes
  // its thread: sampling starts at the first launch).
  void set_first_launch_hook(void (*fn)(void*), void* arg) { first_hook_ = fn, first_arg_ = arg; }

  // -- the collector's thread (graph_sampling.h) -----------------------------------
  // Counts launches whose correlation id comes after the last one any
  // launch callback has seen so far (boundary B). False when no launch
  // callback has carried a correlation id (accounting could not be exact).
  bool begin_accounting();
  // Stops counting launches after the last id seen (boundary R): later
  // launches are left to their records again, for good.
  void end_accounting();
  bool accounting() const { return acct_.load(std::memory_order_acquire) == kAfter; }
  // Marks counted launches from now on as inside a window and keeps their
  // correlation ids as a range; close ends it.
  void open_window();
  void close_window();

  // Since the previous call: counted launches inside and outside windows,
  // samples (window records of counted launches), and records of counted
  // launches outside windows (graph mode: also node kernel records).
  struct Evidence {
    uint64_t window_launches = 0, window_samples = 0;
    uint64_t quiet_launches = 0, quiet_records = 0, stray_nodes = 0;
  };
  Evidence take_evidence();
  // Folds the samples of the windows since the last fold into the decayed
  // means (once per window).
  void fold();

  // -- the translator's thread ----------------------------------------------------------
  // A record of the kind that times replays (graph mode: GRAPH_TRACE; node
  // mode: a graph node's kernel, memcpy or memset record), already
  // translated to the ring record it would be (name id, device, value; for
  // copies sub, name_id kinds and extra bytes as REC_MEMCPY/REC_MEMSET).
  // True when it was taken (a sample, or evidence): the caller then writes
  // nothing. `symbol` names a kernel record.
  bool on_record(uint32_t graph_id, uint32_t corr, const graphsignal_ring_record& rec, const char* symbol);
  // Graph mode: a kernel record of a graph node (CUPTI traced the nodes):
  // evidence when its launch was counted outside a window.
  void on_stray_node(uint32_t corr);

  // The estimates since the last flush (GRAPH_AGG, KERNEL_AGG, copies),
  // names interned through `names` (the translator's, under its lock), and
  // time for counts that had none. `final`: at exit, says what stays untimed.
  void flush(NameTable* names, bool final);

  GraphLaunchStats stats();

 private:
  struct Slot {
    std::atomic<uintptr_t> key{0};
    std::atomic<uint8_t> state{0};  // kEmpty, kLive, kRetired, kFree
    std::atomic<uint32_t> frame{0};
    std::atomic<uint16_t> device{0};
    std::atomic<bool> dynamic{false};   // kernels may differ from the frame's walk
    std::atomic<uint64_t> launches{0};  // counted
    std::atomic<uint64_t> marked{0};    // counted inside windows
    std::atomic<uint64_t> seen{0};      // left to their records while those still teach (see learning_)
    uint64_t sent = 0, seen_sent = 0, evid_marked = 0, evid_launches = 0;  // the collector's thread, under mu_
    int retired_flushes = 0;
  };
  enum : uint8_t { kEmpty = 0, kLive = 1, kRetired = 2, kFree = 3 };
  enum : uint8_t { kNone = 0, kOpening = 1, kAfter = 2, kClosing = 3, kBetween = 4 };

  // A decayed mean: samples of the window in progress, and the sum of the
  // earlier ones halved at each window.
  struct Mean {
    double ns = 0, n = 0;
    uint64_t cur_ns = 0, cur_n = 0;
    bool known() const { return n + static_cast<double>(cur_n) > 0; }
    double mean() const { return (ns + static_cast<double>(cur_ns)) / (n + static_cast<double>(cur_n)); }
    void add(uint64_t v) { cur_ns += v, cur_n++; }
    void fold() {
      ns = 0.5 * (ns + static_cast<double>(cur_ns));
      n = 0.5 * (n + static_cast<double>(cur_n));
      cur_ns = cur_n = 0;
    }
  };
  // Node mode: one kernel symbol, or one kind of copy or memset, inside a frame.
  struct Part {
    Mean time;                 // per record
    double records = 0;        // records of counted launches inside windows (decayed)
    uint64_t cur_records = 0;
    uint64_t learn_records = 0;  // records of launches left to their records (before sampling began)
    uint64_t bytes_total = 0, bytes_records = 0;  // copies: bytes per record
    double carry = 0;          // estimated counts' fractional remainder
    void fold();
    // Both sides as folded at a window's judgment (its records are in by
    // then); before any window, the replays whose records counted them.
    double per_replay(double window_replays, uint64_t learn_replays) const {
      if (window_replays > 0) return records / window_replays;
      return learn_replays ? static_cast<double>(learn_records) / static_cast<double>(learn_replays) : 0;
    }
  };
  struct Frame {
    std::string name;
    GraphShape shape;
    Mean replay;                        // graph mode
    double window_replays = 0;          // node mode: counted replays inside windows (decayed)
    uint64_t cur_window_replays = 0;
    uint64_t learn_replays = 0;         // replays left to their records while they taught
    std::map<std::string, Part> kernels;           // node mode: by symbol
    std::map<uint32_t, Part> copies;               // copy kind | src << 8 | dst << 16; memsets 1 << 24 | kind
    std::map<std::string, uint32_t> multiplicity;  // node mode: the walk's count of each kernel
    // counted but not timed (or, by ratio, not counted) yet, by device
    std::map<uint16_t, uint64_t> pending_replays;                        // graph mode: replays without a mean
    std::map<std::pair<std::string, uint16_t>, uint64_t> pending_calls;  // node mode: kernel calls without a mean
    std::map<uint16_t, uint64_t> pending_dynamic;                        // replays waiting for a ratio (kernels, copies)
    std::map<uint16_t, uint64_t> pending_copies;  // replays waiting for a ratio (copies, kernels the walk missed)
  };

  Slot* find(CUgraphExec exec);
  Slot* insert(uintptr_t key);                                             // under mu_
  uint32_t frame_index(const std::string& name, const GraphShape* shape);  // under data_mu_
  bool counted(uint32_t corr) const;
  bool in_window(uint32_t corr) const;                                     // under data_mu_
  int frame_of_graph(uint32_t graph_id);                                   // under data_mu_; -1: unknown
  int frame_of_launch(uint32_t corr) const;                                // a marked launch's frame; -1: unknown
  void mark(uint32_t corr, uint32_t frame);                                // keeps a launch's frame by its id
  void tally(Frame& f, const graphsignal_ring_record& rec, const char* symbol, bool counted_launch);
  bool ratio_known(const Frame& f, bool final) const;
  void estimate_graph(Frame& f, uint16_t dev, uint64_t replays, NameTable* names);
  void estimate_node(Frame& f, uint16_t dev, uint64_t replays, bool dynamic, NameTable* names, bool final);
  void estimate_by_ratio(Frame& f, uint16_t dev, uint64_t replays, bool kernels, NameTable* names);
  void backfill(NameTable* names, bool final);
  void absorb_marked();  // under mu_ and data_mu_: counted window launches since the last call, into their frames
  void write_agg(uint8_t type, uint8_t flags, uint16_t dev, uint32_t name_id, uint64_t ns, uint64_t calls);
  void write_copy(uint32_t key, uint16_t dev, uint64_t calls, double ns, double bytes);

  RingSink* sink_;
  GraphRegistry* registry_;
  Mode mode_;

  std::mutex mu_;  // binding (workload threads, rare) and the collector's walks over slots
  Slot* slots_;    // kSlots, never freed (callbacks may run during exit)
  std::atomic<uint64_t> unbound_{0};
  std::atomic<uint16_t> unbound_device_{0};

  std::atomic<uint8_t> acct_{kNone};
  std::atomic<uint32_t> acct_after_{0}, acct_until_{0};
  std::atomic<uint32_t> last_corr_{0};
  std::atomic<bool> any_corr_{false};  // a launch callback carried a non-zero correlation id
  std::atomic<bool> learning_{true};   // exact records still teach the means (until accounting ends for good)
  std::atomic<bool> window_open_{false};
  std::atomic<uint32_t> win_lo_{UINT32_MAX}, win_hi_{0};  // the open window's ids, as offsets from B
  std::atomic<const char*> full_trace_reason_{nullptr};
  // The frames of the launches of this window and the last one (before
  // any window: of the launches left to their records), by correlation id:
  // a record whose graph id names no frame (a conditional node's body
  // graph, say) belongs to the launch it came from.
  static constexpr uint32_t kMarks = 4096;
  struct Mark {
    std::atomic<uint32_t> corr{0}, frame{0};
  };
  Mark marks_[2][kMarks];
  std::atomic<uint32_t> n_marks_[2] = {};
  std::atomic<int> cur_marks_{0};

  void (*first_hook_)(void*) = nullptr;
  void* first_arg_ = nullptr;
  std::atomic<bool> first_{false};

  std::mutex data_mu_;
  std::deque<Frame> frames_;
  std::unordered_map<std::string, uint32_t> frame_by_name_;
  std::unordered_map<uint32_t, int> frame_by_graph_;  // CUPTI graph id -> frame (cache)
  uint64_t registry_generation_ = 0;
  struct Range {
    uint32_t lo, hi;  // offsets from B
  };
  Range ranges_[kRanges] = {};
  int n_ranges_ = 0, next_range_ = 0;
  Evidence ev_;          // accumulating (under data_mu_)
  GraphLaunchStats st_;  // under data_mu_
};

}  // namespace cupti
}  // namespace graphsignal
