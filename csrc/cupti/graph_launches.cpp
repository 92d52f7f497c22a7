#include "graph_launches.h"

#include <math.h>
#include <stdio.h>

#include <algorithm>
#include <map>
#include <new>
#include <tuple>

#include "log.h"

namespace graphsignal {
namespace cupti {

namespace {
constexpr size_t kMask = GraphLaunches::kSlots - 1;
static_assert((GraphLaunches::kSlots & kMask) == 0, "slots: a power of two");

size_t hash_of(uintptr_t key) {
  return static_cast<size_t>(((static_cast<uint64_t>(key) >> 4) * 0x9E3779B97F4A7C15ull) >> 40) & kMask;
}

// Correlation ids wrap at 2^32: "after" is a signed distance.
bool after(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) > 0; }

uint64_t round_ns(double v) { return v > 0 ? static_cast<uint64_t>(v + 0.5) : 0; }

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Atomically raises `a` to `v` (wrap-aware); a full fence either way, so
// the caller's next load is ordered after it (graph_launches.h: the
// accounting boundaries).
void raise_to(std::atomic<uint32_t>& a, uint32_t v) {
  uint32_t cur = a.load(std::memory_order_relaxed);
  while (after(v, cur) || cur == 0) {
    if (a.compare_exchange_weak(cur, v, std::memory_order_seq_cst, std::memory_order_relaxed)) return;
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void atomic_min(std::atomic<uint32_t>& a, uint32_t v) {
  uint32_t cur = a.load(std::memory_order_relaxed);
  while (v < cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

void atomic_max(std::atomic<uint32_t>& a, uint32_t v) {
  uint32_t cur = a.load(std::memory_order_relaxed);
  while (v > cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}
}  // namespace

GraphLaunches::GraphLaunches(RingSink* sink, GraphRegistry* registry, Mode mode)
    : sink_(sink), registry_(registry), mode_(mode), slots_(new (std::nothrow) Slot[kSlots]) {
  if (!slots_) log(Level::kWarning, "no memory for the CUDA graph launch table; graph replays are traced in full");
}

// -- workload threads ----------------------------------------------------------------

GraphLaunches::Slot* GraphLaunches::find(CUgraphExec exec) {
  if (!slots_) return nullptr;
  uintptr_t key = reinterpret_cast<uintptr_t>(exec);
  size_t h = hash_of(key);
  for (size_t i = 0; i < kSlots; i++) {
    Slot& s = slots_[(h + i) & kMask];
    uint8_t st = s.state.load(std::memory_order_acquire);
    if (st == kEmpty) return nullptr;
    if (st == kLive && s.key.load(std::memory_order_relaxed) == key) return &s;
  }
  return nullptr;
}

GraphLaunches::Slot* GraphLaunches::insert(uintptr_t key) {
  size_t h = hash_of(key);
  for (size_t i = 0; i < kSlots; i++) {
    Slot& s = slots_[(h + i) & kMask];
    uint8_t st = s.state.load(std::memory_order_relaxed);
    if (st != kEmpty && st != kFree) continue;
    // Readers skip the slot until it is live; its counters start over.
    s.key.store(key, std::memory_order_relaxed);
    s.launches.store(0, std::memory_order_relaxed);
    s.marked.store(0, std::memory_order_relaxed);
    s.dynamic.store(false, std::memory_order_relaxed);
    s.seen.store(0, std::memory_order_relaxed);
    s.sent = s.seen_sent = s.evid_marked = s.evid_launches = 0;
    s.retired_flushes = 0;
    return &s;
  }
  return nullptr;
}

bool GraphLaunches::counted(uint32_t corr) const {
  uint8_t a = acct_.load(std::memory_order_seq_cst);
  for (int spins = 0; a == kOpening || a == kClosing; spins++) {
    // The collector is between two stores (begin/end_accounting): the
    // boundary it reads decides this id; bounded (it never waits on us).
    if (spins > (1 << 16)) return false;
    cpu_relax();
    a = acct_.load(std::memory_order_seq_cst);
  }
  if (a == kNone) return false;
  if (!after(corr, acct_after_.load(std::memory_order_relaxed))) return false;
  if (a == kBetween && after(corr, acct_until_.load(std::memory_order_relaxed))) return false;
  return true;
}

bool GraphLaunches::on_launch(CUgraphExec exec, uint16_t device, uint32_t corr) {
  if (corr) {
    if (!any_corr_.load(std::memory_order_relaxed)) any_corr_.store(true, std::memory_order_relaxed);
    raise_to(last_corr_, corr);  // before reading the state: see begin_accounting
  }
  // after the id is known: the thread it wakes may begin accounting at once
  if (first_hook_ && !first_.load(std::memory_order_relaxed) && !first_.exchange(true)) first_hook_(first_arg_);
  if (!corr) return true;  // no id: never counted (begin_accounting refuses without ids)
  if (!counted(corr)) {
    // left to its records; while they teach, how many replays they came
    // from, and whose (a record of a graph no frame knows finds its launch)
    if (learning_.load(std::memory_order_relaxed) && mode_ == Mode::kNode) {
      if (Slot* s = find(exec)) {
        s->seen.fetch_add(1, std::memory_order_relaxed);
        mark(corr, s->frame.load(std::memory_order_relaxed));
      }
    }
    return true;
  }
  Slot* s = find(exec);
  if (!s) return false;
  s->device.store(device, std::memory_order_relaxed);
  s->launches.fetch_add(1, std::memory_order_relaxed);
  if (window_open_.load(std::memory_order_acquire)) {
    s->marked.fetch_add(1, std::memory_order_relaxed);
    uint32_t d = corr - acct_after_.load(std::memory_order_relaxed);
    atomic_min(win_lo_, d);
    atomic_max(win_hi_, d);
    mark(corr, s->frame.load(std::memory_order_relaxed));
  }
  return true;
}

void GraphLaunches::mark(uint32_t corr, uint32_t frame) {
  int m = cur_marks_.load(std::memory_order_relaxed);
  uint32_t i = n_marks_[m].fetch_add(1, std::memory_order_relaxed);
  if (i < kMarks) {
    marks_[m][i].frame.store(frame, std::memory_order_relaxed);
    marks_[m][i].corr.store(corr, std::memory_order_release);
  }
}

int GraphLaunches::frame_of_launch(uint32_t corr) const {
  for (int m = 0; m < 2; m++) {
    uint32_t n = std::min(n_marks_[m].load(std::memory_order_acquire), kMarks);
    for (uint32_t i = 0; i < n; i++)
      if (marks_[m][i].corr.load(std::memory_order_acquire) == corr)
        return static_cast<int>(marks_[m][i].frame.load(std::memory_order_relaxed));
  }
  return -1;
}

void GraphLaunches::count_unbound(uint16_t device) {
  unbound_.fetch_add(1, std::memory_order_relaxed);
  unbound_device_.store(device, std::memory_order_relaxed);
}

void GraphLaunches::bind(CUgraphExec exec, const std::string& name, const GraphShape* shape, bool device_launch) {
  if (!slots_ || !exec || name.empty()) return;
  if (device_launch && mode_ == Mode::kNode && !full_trace_reason_.load(std::memory_order_relaxed))
    full_trace_reason_.store("a CUDA graph was instantiated for device launch: launch callbacks cannot count its "
                             "replays, so its nodes are traced", std::memory_order_release);
  std::lock_guard<std::mutex> g(mu_);
  uint32_t frame;
  bool dynamic;
  {
    std::lock_guard<std::mutex> d(data_mu_);
    frame = frame_index(name, shape);
    const Frame& f = frames_[frame];
    dynamic = !f.shape.known || f.shape.conditional;
  }
  if (Slot* old = find(exec)) old->state.store(kRetired, std::memory_order_release);
  Slot* s = insert(reinterpret_cast<uintptr_t>(exec));
  if (!s) {
    GS_LOG_ONCE(Level::kInfo, "more than %zu CUDA graph executables at once; later ones are counted as "
                "graph_unbound", kSlots);
    return;
  }
  s->frame.store(frame, std::memory_order_relaxed);
  s->dynamic.store(dynamic, std::memory_order_relaxed);
  s->state.store(kLive, std::memory_order_release);
}

bool GraphLaunches::updated(CUgraphExec exec, const GraphShape* shape) {
  std::lock_guard<std::mutex> g(mu_);
  Slot* s = find(exec);
  if (!s) return false;
  if (mode_ == Mode::kGraph) return true;  // graph mode times replays whole: the kernels do not matter
  std::lock_guard<std::mutex> d(data_mu_);
  const Frame& f = frames_[s->frame.load(std::memory_order_relaxed)];
  if (!shape || *shape != f.shape) s->dynamic.store(true, std::memory_order_relaxed);
  return true;
}

void GraphLaunches::modified(CUgraphExec exec) {
  std::lock_guard<std::mutex> g(mu_);
  if (Slot* s = find(exec)) s->dynamic.store(true, std::memory_order_relaxed);
}

void GraphLaunches::retire(CUgraphExec exec) {
  std::lock_guard<std::mutex> g(mu_);
  if (Slot* s = find(exec)) s->state.store(kRetired, std::memory_order_release);
}

uint32_t GraphLaunches::frame_index(const std::string& name, const GraphShape* shape) {
  auto it = frame_by_name_.find(name);
  if (it != frame_by_name_.end()) return it->second;
  std::string key = frames_.size() < kMaxFrames ? name : std::string("graph_other");
  it = frame_by_name_.find(key);
  if (it != frame_by_name_.end()) return it->second;
  frames_.emplace_back();
  Frame& f = frames_.back();
  f.name = key;
  if (shape && key == name) f.shape = *shape;
  for (const std::string& k : f.shape.kernels) f.multiplicity[k]++;
  uint32_t index = static_cast<uint32_t>(frames_.size() - 1);
  frame_by_name_.emplace(key, index);
  return index;
}

// -- the collector's thread -----------------------------------------------------------

bool GraphLaunches::begin_accounting() {
  if (!slots_ || !any_corr_.load(std::memory_order_relaxed)) return false;
  if (acct_.load(std::memory_order_relaxed) != kNone) return true;
  // Store the transition first, then read the last id (launches raise it
  // before reading the state): a launch either saw kNone and its id is at
  // or below B, or sees the transition and waits for B. Nothing in between
  // can call this thread (it is the collector's own).
  acct_.store(kOpening, std::memory_order_seq_cst);
  acct_after_.store(last_corr_.load(std::memory_order_seq_cst), std::memory_order_relaxed);
  acct_.store(kAfter, std::memory_order_seq_cst);
  return true;
}

void GraphLaunches::end_accounting() {
  if (acct_.load(std::memory_order_relaxed) != kAfter) return;
  acct_.store(kClosing, std::memory_order_seq_cst);
  acct_until_.store(last_corr_.load(std::memory_order_seq_cst), std::memory_order_relaxed);
  acct_.store(kBetween, std::memory_order_seq_cst);
  learning_.store(false, std::memory_order_relaxed);
}

void GraphLaunches::open_window() {
  // the older of the two mark lists starts over (the last window's records may still come in)
  int m = 1 - cur_marks_.load(std::memory_order_relaxed);
  n_marks_[m].store(0, std::memory_order_relaxed);
  cur_marks_.store(m, std::memory_order_release);
  win_lo_.store(UINT32_MAX, std::memory_order_relaxed);
  win_hi_.store(0, std::memory_order_relaxed);
  window_open_.store(true, std::memory_order_release);
}

void GraphLaunches::close_window() {
  window_open_.store(false, std::memory_order_release);
  uint32_t lo = win_lo_.load(std::memory_order_relaxed), hi = win_hi_.load(std::memory_order_relaxed);
  if (lo > hi) return;  // no launch inside
  std::lock_guard<std::mutex> d(data_mu_);
  ranges_[next_range_] = Range{lo, hi};
  next_range_ = (next_range_ + 1) % kRanges;
  if (n_ranges_ < kRanges) n_ranges_++;
}

bool GraphLaunches::in_window(uint32_t corr) const {
  uint32_t d = corr - acct_after_.load(std::memory_order_relaxed);
  if (window_open_.load(std::memory_order_acquire)) {
    uint32_t lo = win_lo_.load(std::memory_order_relaxed), hi = win_hi_.load(std::memory_order_relaxed);
    if (lo <= hi && d >= lo && d <= hi) return true;
  }
  for (int i = 0; i < n_ranges_; i++)
    if (d >= ranges_[i].lo && d <= ranges_[i].hi) return true;
  return false;
}

void GraphLaunches::absorb_marked() {
  if (!slots_) return;
  for (size_t i = 0; i < kSlots; i++) {
    Slot& s = slots_[i];
    uint8_t st = s.state.load(std::memory_order_acquire);
    if (st != kLive && st != kRetired) continue;
    uint64_t l = s.launches.load(std::memory_order_relaxed), m = s.marked.load(std::memory_order_relaxed);
    uint64_t dl = l - s.evid_launches, dm = m - s.evid_marked;
    s.evid_launches = l, s.evid_marked = m;
    ev_.window_launches += dm;
    ev_.quiet_launches += dl > dm ? dl - dm : 0;
    frames_[s.frame.load(std::memory_order_relaxed)].cur_window_replays += dm;
  }
}

GraphLaunches::Evidence GraphLaunches::take_evidence() {
  std::lock_guard<std::mutex> g(mu_);
  std::lock_guard<std::mutex> d(data_mu_);
  absorb_marked();
  Evidence e = ev_;
  ev_ = Evidence();
  return e;
}

void GraphLaunches::fold() {
  std::lock_guard<std::mutex> d(data_mu_);
  for (Frame& f : frames_) {
    f.replay.fold();
    f.window_replays = 0.5 * (f.window_replays + static_cast<double>(f.cur_window_replays));
    f.cur_window_replays = 0;
    for (auto& kv : f.kernels) kv.second.fold();
    for (auto& kv : f.copies) kv.second.fold();
  }
}

void GraphLaunches::Part::fold() {
  time.fold();
  records = 0.5 * (records + static_cast<double>(cur_records));
  cur_records = 0;
}

// -- the translator's thread ------------------------------------------------------------

int GraphLaunches::frame_of_graph(uint32_t graph_id) {
  if (!registry_) return -1;
  uint64_t gen = registry_->generation();
  if (gen != registry_generation_) {
    registry_generation_ = gen;
    frame_by_graph_.clear();
  }
  auto it = frame_by_graph_.find(graph_id);
  if (it != frame_by_graph_.end()) return it->second;
  std::string name;
  int f = -1;
  if (registry_->name_for(graph_id, &name)) {
    auto n = frame_by_name_.find(name);
    if (n != frame_by_name_.end()) f = static_cast<int>(n->second);
  }
  if (frame_by_graph_.size() < (1u << 16)) frame_by_graph_.emplace(graph_id, f);
  return f;
}

void GraphLaunches::tally(Frame& f, const graphsignal_ring_record& rec, const char* symbol, bool counted_launch) {
  if (rec.type == GRAPHSIGNAL_REC_GRAPH) {
    f.replay.add(rec.value);
    return;
  }
  Part* p;
  if (rec.type == GRAPHSIGNAL_REC_KERNEL) {
    p = &f.kernels[symbol ? symbol : "<unknown kernel>"];
  } else if (rec.type == GRAPHSIGNAL_REC_MEMCPY) {
    p = &f.copies[static_cast<uint32_t>(rec.sub) | (rec.name_id & 0xFFFF) << 8];
  } else {
    p = &f.copies[(1u << 24) | rec.sub];
  }
  p->time.add(rec.value);
  if (rec.type != GRAPHSIGNAL_REC_KERNEL) p->bytes_total += rec.extra, p->bytes_records++;
  if (counted_launch) p->cur_records++;
  else p->learn_records++;
}

bool GraphLaunches::on_record(uint32_t graph_id, uint32_t corr, const graphsignal_ring_record& rec,
                              const char* symbol) {
  bool is_counted = counted(corr);
  if (!is_counted && !learning_.load(std::memory_order_relaxed)) return false;
  std::lock_guard<std::mutex> d(data_mu_);
  int f = frame_of_graph(graph_id);
  if (!is_counted) {
    // Left to its records (written by the caller); its time still teaches
    // the means, so estimates have one from the first window on.
    if (f < 0 && mode_ == Mode::kNode) f = frame_of_launch(corr);
    if (f >= 0) tally(frames_[f], rec, symbol, false);
    st_.exact++;
    return false;
  }
  // Kernel-level evidence only: node mode's quiet state (GRAPH_TRACE on)
  // may not hide copy nodes; their records are then dropped the same way
  // (the estimate covers them), but sampling still pays off for kernels.
  bool timing_kind = rec.type == GRAPHSIGNAL_REC_GRAPH || rec.type == GRAPHSIGNAL_REC_KERNEL;
  if (!in_window(corr)) {
    // A counted launch outside every window still produced its record:
    // the quiet state did not stop CUPTI. Evidence; dropped (the launch's
    // estimate covers it).
    if (timing_kind) ev_.quiet_records++, st_.quiet_records++;
    return true;
  }
  if (f < 0) {
    // a graph no frame knows (a conditional node's body, a child graph):
    // the launch it came from says whose replay it was
    f = frame_of_launch(corr);
    if (f < 0) {
      st_.unknown_samples++;
      return true;
    }
    if (frame_by_graph_.size() < (1u << 16)) frame_by_graph_[graph_id] = f;
  }
  tally(frames_[f], rec, symbol, true);
  ev_.window_samples++;
  st_.samples++;
  return true;
}

void GraphLaunches::on_stray_node(uint32_t corr) {
  if (!counted(corr)) return;
  std::lock_guard<std::mutex> d(data_mu_);
  if (in_window(corr)) return;
  ev_.stray_nodes++;
  st_.stray_nodes++;
}

// -- estimates ---------------------------------------------------------------------------

void GraphLaunches::write_agg(uint8_t type, uint8_t flags, uint16_t dev, uint32_t name_id, uint64_t ns,
                              uint64_t calls) {
  if (!name_id || (!ns && !calls)) return;
  sink_->write(type, flags, dev, name_id, ns, calls);
}

void GraphLaunches::write_copy(uint32_t key, uint16_t dev, uint64_t calls, double ns, double bytes) {
  if (!calls) return;
  bool memset = key >> 24;
  uint8_t sub = static_cast<uint8_t>(key & 0x7F) | kSubCountEstimated;
  // MEMCPY_SAMPLED carries 16 bits of calls beside the memory kinds: more
  // go in records of their own, the sums in the last (as call_tables.cpp).
  const uint64_t most = memset ? 0xFFFFFFFFull : 0xFFFFull;
  while (calls > most) {
    if (memset) sink_->write(GRAPHSIGNAL_REC_MEMSET_SAMPLED, sub, dev, static_cast<uint32_t>(most), 0, 0);
    else sink_->write(GRAPHSIGNAL_REC_MEMCPY_SAMPLED, sub, dev, ((key >> 8) & 0xFFFF) | static_cast<uint32_t>(most) << 16,
                      0, 0);
    calls -= most;
  }
  if (memset) {
    sink_->write(GRAPHSIGNAL_REC_MEMSET_SAMPLED, sub, dev, static_cast<uint32_t>(calls), round_ns(ns),
                 round_ns(bytes));
  } else {
    sink_->write(GRAPHSIGNAL_REC_MEMCPY_SAMPLED, sub, dev, ((key >> 8) & 0xFFFF) | static_cast<uint32_t>(calls) << 16,
                 round_ns(ns), round_ns(bytes));
  }
}

void GraphLaunches::estimate_graph(Frame& f, uint16_t dev, uint64_t replays, NameTable* names) {
  uint64_t ns = 0;
  if (f.replay.known()) ns = round_ns(static_cast<double>(replays) * f.replay.mean());
  else f.pending_replays[dev] += replays;
  write_agg(GRAPHSIGNAL_REC_GRAPH_AGG, kAggSampled, dev, names->id(f.name), ns, replays);
}

bool GraphLaunches::ratio_known(const Frame& f, bool final) const {
  if (f.window_replays > 0) return true;
  // Replays left to their records teach only at the end (their last
  // records may still be on the way before), and once some came in.
  if (!final || !f.learn_replays) return false;
  // replays left to their records teach only once some of those came in
  for (const auto& kv : f.kernels)
    if (kv.second.learn_records) return true;
  for (const auto& kv : f.copies)
    if (kv.second.learn_records) return true;
  return false;
}

void GraphLaunches::estimate_by_ratio(Frame& f, uint16_t dev, uint64_t replays, bool kernels, NameTable* names) {
  // Records per replay inside windows stand for every replay: the count is
  // an estimate, flagged so. With the walk's kernels counted already
  // (!kernels), the kernel records the walk does not name still count this
  // way (a node CUPTI reports as a kernel, such as a memset run as one).
  double wr = f.window_replays;
  {
    for (auto& kv : f.kernels) {
      if (!kernels && f.multiplicity.count(kv.first)) continue;
      Part& p = kv.second;
      double x = static_cast<double>(replays) * p.per_replay(wr, f.learn_replays) + p.carry;
      uint64_t calls = static_cast<uint64_t>(floor(x));
      p.carry = x - static_cast<double>(calls);
      if (!calls) continue;
      double ns = p.time.known() ? static_cast<double>(calls) * p.time.mean() : 0;
      write_agg(GRAPHSIGNAL_REC_KERNEL_AGG, kAggSampled | kAggCountEstimated, dev, names->id(kv.first), round_ns(ns),
                calls);
    }
  }
  for (auto& kv : f.copies) {
    Part& p = kv.second;
    double x = static_cast<double>(replays) * p.per_replay(wr, f.learn_replays) + p.carry;
    uint64_t calls = static_cast<uint64_t>(floor(x));
    p.carry = x - static_cast<double>(calls);
    if (!calls) continue;
    double per_record_bytes = p.bytes_records ? static_cast<double>(p.bytes_total) / p.bytes_records : 0;
    write_copy(kv.first, dev, calls, p.time.known() ? static_cast<double>(calls) * p.time.mean() : 0,
               static_cast<double>(calls) * per_record_bytes);
  }
}

void GraphLaunches::estimate_node(Frame& f, uint16_t dev, uint64_t replays, bool dynamic, NameTable* names,
                                  bool final) {
  if (!dynamic && !f.multiplicity.empty() && !f.kernels.empty() && ratio_known(f, false)) {
    // Windows sampled this frame's kernels: the walk's symbols must be
    // among them, or the walk does not name what CUPTI records.
    bool any = false;
    for (const auto& kv : f.multiplicity) any = any || f.kernels.count(kv.first);
    if (!any) {
      GS_LOG_ONCE(Level::kInfo, "the kernels a CUDA graph walk names are not the ones CUPTI records (e.g. %s); "
                  "node kernel counts are estimated from sampled windows", f.name.c_str());
      f.shape.known = false;
      f.multiplicity.clear();
    }
  }
  bool by_shape = !dynamic && f.shape.known && !f.shape.conditional;
  if (by_shape) {
    // Exact counts: the walk says what each replay runs.
    for (const auto& kv : f.multiplicity) {
      uint64_t calls = replays * kv.second;
      auto p = f.kernels.find(kv.first);
      uint64_t ns = 0;
      if (p != f.kernels.end() && p->second.time.known()) ns = round_ns(static_cast<double>(calls) * p->second.time.mean());
      else f.pending_calls[std::make_pair(kv.first, dev)] += calls;
      write_agg(GRAPHSIGNAL_REC_KERNEL_AGG, kAggSampled, dev, names->id(kv.first), ns, calls);
    }
  }
  if (!ratio_known(f, final)) {
    (by_shape ? f.pending_copies : f.pending_dynamic)[dev] += replays;
    return;
  }
  estimate_by_ratio(f, dev, replays, !by_shape, names);
}

void GraphLaunches::flush(NameTable* names, bool final) {
  if (!slots_) return;
  std::lock_guard<std::mutex> g(mu_);
  std::lock_guard<std::mutex> d(data_mu_);
  if (final) {
    // The windows so far, judged now: at exit their records are all in.
    absorb_marked();
    for (Frame& f : frames_) {
      f.window_replays = 0.5 * (f.window_replays + static_cast<double>(f.cur_window_replays));
      f.cur_window_replays = 0;
      for (auto& kv : f.kernels) kv.second.fold();
      for (auto& kv : f.copies) kv.second.fold();
    }
  }
  // Replays since the last flush, by (frame, device, kernels known from the walk).
  std::map<std::tuple<uint32_t, uint16_t, bool>, uint64_t> groups;
  for (size_t i = 0; i < kSlots; i++) {
    Slot& s = slots_[i];
    uint8_t st = s.state.load(std::memory_order_acquire);
    if (st != kLive && st != kRetired) continue;
    uint64_t seen = s.seen.load(std::memory_order_relaxed);
    if (seen != s.seen_sent) {
      frames_[s.frame.load(std::memory_order_relaxed)].learn_replays += seen - s.seen_sent;
      s.seen_sent = seen;
    }
    uint64_t l = s.launches.load(std::memory_order_relaxed);
    if (l != s.sent) {
      groups[std::make_tuple(s.frame.load(std::memory_order_relaxed), s.device.load(std::memory_order_relaxed),
                             s.dynamic.load(std::memory_order_relaxed))] += l - s.sent;
      st_.counted += l - s.sent;
      s.sent = l;
    }
    // A retired slot is reused after two more flushes (a launch that found
    // it just before its executable was destroyed has counted by then).
    if (st == kRetired && ++s.retired_flushes > 2 && s.launches.load(std::memory_order_relaxed) == s.sent)
      s.state.store(kFree, std::memory_order_release);
  }
  for (const auto& kv : groups) {
    Frame& f = frames_[std::get<0>(kv.first)];
    if (mode_ == Mode::kGraph) estimate_graph(f, std::get<1>(kv.first), kv.second, names);
    else estimate_node(f, std::get<1>(kv.first), kv.second, std::get<2>(kv.first), names, final);
  }
  uint64_t unbound = unbound_.exchange(0, std::memory_order_relaxed);
  if (unbound) {
    st_.unbound += unbound;
    // Launches of an executable this library never saw instantiated (and
    // could not name): counted, not timed.
    if (mode_ == Mode::kGraph)
      write_agg(GRAPHSIGNAL_REC_GRAPH_AGG, kAggSampled, unbound_device_.load(std::memory_order_relaxed),
                names->id(std::string("graph_unbound")), 0, unbound);
    else
      GS_LOG_ONCE(Level::kInfo, "replays of CUDA graphs this library never saw instantiated: their kernels are not "
                  "counted in node mode");
  }
  backfill(names, final);
}

void GraphLaunches::backfill(NameTable* names, bool final) {
  // Time for what was counted before its frame had a sample; at exit, what
  // never got one is said once.
  uint64_t untimed = 0, uncounted = 0;
  for (Frame& f : frames_) {
    for (auto it = f.pending_replays.begin(); it != f.pending_replays.end();) {
      if (f.replay.known()) {
        write_agg(GRAPHSIGNAL_REC_GRAPH_AGG, kAggSampled, it->first, names->id(f.name),
                  round_ns(static_cast<double>(it->second) * f.replay.mean()), 0);
        it = f.pending_replays.erase(it);
      } else {
        if (final) untimed += it->second;
        ++it;
      }
    }
    for (auto it = f.pending_calls.begin(); it != f.pending_calls.end();) {
      auto p = f.kernels.find(it->first.first);
      if (p != f.kernels.end() && p->second.time.known()) {
        write_agg(GRAPHSIGNAL_REC_KERNEL_AGG, kAggSampled, it->first.second, names->id(it->first.first),
                  round_ns(static_cast<double>(it->second) * p->second.time.mean()), 0);
        it = f.pending_calls.erase(it);
      } else {
        if (final) untimed += it->second;
        ++it;
      }
    }
    if (!ratio_known(f, final)) {
      if (final) {
        for (const auto& kv : f.pending_dynamic) uncounted += kv.second;
      }
      continue;
    }
    for (const auto& kv : f.pending_dynamic) estimate_by_ratio(f, kv.first, kv.second, true, names);
    for (const auto& kv : f.pending_copies) estimate_by_ratio(f, kv.first, kv.second, false, names);
    f.pending_dynamic.clear();
    f.pending_copies.clear();
  }
  if (final && untimed)
    log(Level::kInfo, "%llu CUDA graph replays (or node kernels) were counted but never timed: no sampling window "
        "saw their graph", static_cast<unsigned long long>(untimed));
  if (final && uncounted)
    log(Level::kInfo, "%llu replays of CUDA graphs whose kernels vary were never sampled: their node kernels are not "
        "counted", static_cast<unsigned long long>(uncounted));
}

GraphLaunchStats GraphLaunches::stats() {
  std::lock_guard<std::mutex> d(data_mu_);
  return st_;
}

}  // namespace cupti
}  // namespace graphsignal
