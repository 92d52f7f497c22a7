#include "kernel_counts.h"

#include <stdio.h>
#include <string.h>

#include <new>

#include "log.h"

namespace graphsignal {
namespace cupti {

namespace {
thread_local void* tl_table = nullptr;  // this thread's KernelCounts::Table (one KernelCounts per process)
thread_local bool tl_no_table = false;

const char kUnknown[] = "<unknown kernel>";

uint64_t round_ns(double v) { return v > 0 ? static_cast<uint64_t>(v + 0.5) : 0; }

unsigned long long u(uint64_t v) { return static_cast<unsigned long long>(v); }
}  // namespace

KernelCounts::Table* KernelCounts::table() {
  if (tl_table) return static_cast<Table*>(tl_table);
  if (tl_no_table) return nullptr;
  if (n_tables_.fetch_add(1, std::memory_order_relaxed) >= kMaxTables) {
    tl_no_table = true;
    return nullptr;
  }
  Table* t = new (std::nothrow) Table();
  if (!t) {
    tl_no_table = true;
    return nullptr;
  }
  Table* head = tables_.load(std::memory_order_relaxed);
  do {
    t->next = head;
  } while (!tables_.compare_exchange_weak(head, t, std::memory_order_release, std::memory_order_relaxed));
  tl_table = t;
  return t;
}

const std::string* KernelCounts::intern(const char* symbol) {
  std::string s(symbol ? symbol : kUnknown);
  auto it = interned_.find(s);
  if (it != interned_.end()) return it->second;
  if (interned_.size() >= kMaxSymbols) {
    GS_LOG_ONCE(Level::kInfo, "more than %zu kernel symbols; later ones are counted as kernel_other", kMaxSymbols);
    s = "kernel_other";
    it = interned_.find(s);
    if (it != interned_.end()) return it->second;
  }
  storage_.push_back(s);
  const std::string* p = &storage_.back();
  interned_.emplace(s, p);
  return p;
}

void KernelCounts::add(const char* symbol, uint16_t device) {
  if (!counting_.load(std::memory_order_relaxed)) return;
  uintptr_t key = reinterpret_cast<uintptr_t>(symbol ? symbol : kUnknown) | static_cast<uintptr_t>(device) << 48;
  Table* t = table();
  if (t) {
    uint32_t h = static_cast<uint32_t>((static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> 55);  // 9 bits
    for (int i = 0; i < kSlots; i++) {
      Slot& s = t->slots[(h + i) & (kSlots - 1)];
      uintptr_t k = s.key.load(std::memory_order_relaxed);
      if (k != key) {
        if (k) continue;
        // First launch of this symbol on this thread: interned once (a
        // lock, a copy); the flusher sees the key only with its name.
        const std::string* name;
        {
          std::lock_guard<std::mutex> g(intern_mu_);
          name = intern(symbol);
        }
        s.name.store(name, std::memory_order_relaxed);
        s.key.store(key, std::memory_order_release);
      }
      // Single writer: a plain store, no read-modify-write.
      s.calls.store(s.calls.load(std::memory_order_relaxed) + 1, std::memory_order_release);
      return;
    }
  }
  // Not tabled (a thread's table full, too many threads): counted in a
  // shared map under a lock (rare by construction).
  std::lock_guard<std::mutex> g(direct_mu_);
  const std::string* name;
  {
    std::lock_guard<std::mutex> i(intern_mu_);
    name = intern(symbol);
  }
  direct_[std::make_pair(name, device)]++;
  untabled_.fetch_add(1, std::memory_order_relaxed);
}

uint64_t KernelCounts::counted_total() {
  uint64_t n = untabled_.load(std::memory_order_relaxed);
  for (Table* t = tables_.load(std::memory_order_acquire); t; t = t->next)
    for (Slot& s : t->slots)
      if (s.key.load(std::memory_order_acquire)) n += s.calls.load(std::memory_order_acquire);
  return n;
}

KernelCounts::Symbol& KernelCounts::symbol(const std::string& name) {
  auto it = symbols_.find(name);
  if (it != symbols_.end()) return it->second;
  return symbols_.emplace(name, Symbol()).first->second;
}

void KernelCounts::sample(const char* symbol_name, uint16_t device, uint64_t ns) {
  window_records_++;
  st_.samples++;
  Mean& m = symbol(symbol_name ? symbol_name : kUnknown).by_device[device];
  m.cur_ns += ns, m.cur_n++;
}

bool KernelCounts::on_window_open() {
  // Judges the previous window: its records are in by now (tracing was off
  // since it closed, and the collector flushed CUPTI's buffers in between).
  if (ended_) return false;
  bool ok = true;
  if (judge_) {
    judge_ = false;
    st_.windows++;
    if (window_records_ > 2 * window_launches_ + 64) {
      static char why[200];
      snprintf(why, sizeof why, "a sampling window's %llu eager kernel records came from %llu launches the "
               "callbacks counted", u(window_records_), u(window_launches_));
      ended_ = why;
      counting_.store(false, std::memory_order_relaxed);
      log(Level::kInfo, "eager kernels are traced in full from now on: %s (launches reach the GPU by a way the "
          "launch callbacks do not see)", why);
      ok = false;
    }
  }
  window_records_ = 0;
  window_start_counted_ = counted_total();
  window_open_ = true;
  return ok;
}

void KernelCounts::on_window_close() {
  if (!window_open_) return;
  window_open_ = false;
  window_launches_ = counted_total() - window_start_counted_;
  judge_ = true;
  // The means: the samples so far (this window's records mostly come later,
  // and are folded at the next close), the earlier ones halved.
  for (auto& kv : symbols_) {
    for (auto& d : kv.second.by_device) {
      Mean& m = d.second;
      m.ns = 0.5 * (m.ns + static_cast<double>(m.cur_ns));
      m.n = 0.5 * (m.n + static_cast<double>(m.cur_n));
      m.cur_ns = m.cur_n = 0;
    }
  }
}

void KernelCounts::write(uint16_t dev, const std::string& name, uint64_t calls, uint64_t ns, NameTable* names) {
  uint32_t id = names->id(name);
  if (!id) return;
  // extra: the calls (64 bits); value: the estimated ns
  sink_->write(GRAPHSIGNAL_REC_KERNEL_AGG, 1 /* GRAPHSIGNAL_AGG_FLAG_SAMPLED */, dev, id, ns, calls);
}

void KernelCounts::flush(NameTable* names, bool final) {
  // Counts since the last flush, by (name, device).
  std::map<std::pair<const std::string*, uint16_t>, uint64_t> got;
  for (Table* t = tables_.load(std::memory_order_acquire); t; t = t->next) {
    for (Slot& s : t->slots) {
      uintptr_t key = s.key.load(std::memory_order_acquire);
      if (!key) continue;
      uint64_t calls = s.calls.load(std::memory_order_acquire);
      if (calls == s.sent) continue;
      const std::string* name = s.name.load(std::memory_order_relaxed);
      got[std::make_pair(name, static_cast<uint16_t>(key >> 48))] += calls - s.sent;
      s.sent = calls;
    }
  }
  {
    std::lock_guard<std::mutex> g(direct_mu_);
    for (const auto& kv : direct_) got[kv.first] += kv.second;
    direct_.clear();
  }
  for (const auto& kv : got) {
    const std::string& name = *kv.first.first;
    uint16_t dev = kv.first.second;
    Symbol& sym = symbol(name);
    auto m = sym.by_device.find(dev);
    uint64_t ns = 0;
    if (m != sym.by_device.end() && m->second.known()) ns = round_ns(static_cast<double>(kv.second) * m->second.mean());
    else sym.pending[dev] += kv.second;
    st_.counted += kv.second;
    write(dev, name, kv.second, ns, names);
  }
  st_.untabled = untabled_.load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> g(intern_mu_);
    st_.symbols = interned_.size();
  }
  // Time for calls sent before their symbol had a sample.
  uint64_t untimed = 0;
  for (auto& kv : symbols_) {
    Symbol& sym = kv.second;
    for (auto it = sym.pending.begin(); it != sym.pending.end();) {
      auto m = sym.by_device.find(it->first);
      if (m != sym.by_device.end() && m->second.known()) {
        write(it->first, kv.first, 0, round_ns(static_cast<double>(it->second) * m->second.mean()), names);
        it = sym.pending.erase(it);
      } else {
        untimed += it->second;
        ++it;
      }
    }
  }
  st_.untimed = untimed;
  if (final && untimed)
    log(Level::kInfo, "%llu eager kernel launches were counted but never timed: no sampling window saw their kernel "
        "(GRAPHSIGNAL_CUPTI_KERNEL_SAMPLING=off times every launch)", u(untimed));
}

}  // namespace cupti
}  // namespace graphsignal
