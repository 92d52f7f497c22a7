// The NVTX flusher (nvtx_flusher.h): harvest the sums, encode them as ring
// records, one flush at a time; a full ring leaves them pending, never lost
// or waited for.
#include "nvtx_flusher.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"

namespace graphsignal {
namespace cupti {
namespace nvtx {

namespace {

constexpr uint64_t kRingCapacity = 1u << 14;  // records (GRAPHSIGNAL_RING_CAPACITY wins): one per frame and flush
constexpr uint64_t kRingStrings = 1u << 20;   // bytes: every frame's path, with room to spare
constexpr int kMaxSendAttempts = 4;           // a name the string area refuses is not retried forever

// The metric families (SKILL.md names them; the sidecar adds process.pid).
const char kHostMetric[] = "nvtx_ranges_nanoseconds";
const char kGpuMetric[] = "nvtx_range_gpu_nanoseconds";
const char kMarksMetric[] = "nvtx_marks";
const char kDroppedMetric[] = "graphsignal_nvtx_dropped";

}  // namespace

graphsignal_ring_header* Flusher::open_ring() {
  char name[256];
  if (!graphsignal_ring_name(name, sizeof name, "nvtx")) {
    log(Level::kDebug, "not running under graphsignal-run (no %s); NVTX ranges are not collected",
        GRAPHSIGNAL_RUN_ID_ENV);
    return nullptr;
  }
  uint64_t cap = graphsignal_ring_env_capacity_value();
  size_t size = 0;
  graphsignal_ring_header* ring =
      graphsignal_ring_open(name, GRAPHSIGNAL_KIND_NVTX, cap ? cap : kRingCapacity, kRingStrings, &size);
  if (!ring) {
    int err = errno;
    log(Level::kWarning, "cannot create /dev/shm/%s: %s; NVTX ranges are not collected", name,
        graphsignal_ring_error_text(err));
  }
  return ring;
}

Flusher::Flusher(graphsignal_ring_header* ring, DomainTable* domains, PathTable* paths, Stacks* stacks,
                 Problems* problems, bool (*more_coming)())
    : sink_(ring), domains_(domains), paths_(paths), stacks_(stacks), problems_(problems), more_coming_(more_coming) {
  // zeroed and never moved; calloc: pages of paths never made stay untouched
  pend_ns_ = static_cast<uint64_t*>(calloc(kPathSlots, sizeof(uint64_t)));
  pend_count_ = static_cast<uint64_t*>(calloc(kPathSlots, sizeof(uint64_t)));
  path_sent_ = static_cast<PathSent*>(calloc(kPathSlots, sizeof(PathSent)));
}

// -- the thread -----------------------------------------------------------------------
bool Flusher::start_thread(unsigned period_ms) {
  period_ms_ = period_ms;
  pthread_t t;
  {
    std::lock_guard<std::mutex> g(ctl_mu_);
    thread_done_ = false;
  }
  if (pthread_create(&t, nullptr, thread_main, this) == 0) {
    pthread_detach(t);  // never joined: at exit it is asked to stop, and waited for a bounded time
    return true;
  }
  std::lock_guard<std::mutex> g(ctl_mu_);
  thread_done_ = true;
  return false;
}

void* Flusher::thread_main(void* self) {
  static_cast<Flusher*>(self)->loop();
  return nullptr;
}

void Flusher::loop() {
  std::unique_lock<std::mutex> lk(ctl_mu_);
  while (!stopping_) {
    cv_.wait_for(lk, std::chrono::milliseconds(period_ms_), [this] { return stopping_; });
    if (stopping_) break;
    lk.unlock();
    flush(false);
    lk.lock();
  }
  thread_done_ = true;
  lk.unlock();
  cv_.notify_all();
}

void Flusher::stop_thread(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lk(ctl_mu_);
  stopping_ = true;
  cv_.notify_all();
  // a flush in progress finishes first; bounded: exit never hangs on the profiler
  cv_.wait_for(lk, wait, [this] { return thread_done_; });
}

// -- encoding -------------------------------------------------------------------------
bool Flusher::send_instruments(int domain) {
  DomainSent& d = domain_sent_[domain];
  if (d.host_inst && d.gpu_inst && d.marks_inst) return true;
  if (d.attempts >= kMaxSendAttempts) return false;
  const Domain* dom = domains_->at(domain);
  static const char* const kTypes[3] = {"profile", "profile", "counter"};
  static const char* const kNames[3] = {kHostMetric, kGpuMetric, kMarksMetric};
  uint32_t* ids[3] = {&d.host_inst, &d.gpu_inst, &d.marks_inst};
  for (int i = 0; i < 3; i++) {
    if (*ids[i]) continue;
    char def[160];  // probe.h's instrument definition: type, name, then key \x1e value
    int n = snprintf(def, sizeof def, "%s\x1f%s\x1fnvtx.domain\x1e%.*s", kTypes[i], kNames[i],
                     static_cast<int>(dom->len), dom->name);
    if (n <= 0 || static_cast<size_t>(n) >= sizeof def) return false;
    uint32_t id = sink_.new_name_id();
    if (!sink_.send_name(id, def, static_cast<size_t>(n), GRAPHSIGNAL_NAME_INSTRUMENT)) {
      d.attempts++;
      return false;
    }
    *ids[i] = id;
  }
  return true;
}

bool Flusher::send_path(uint32_t path) {
  PathSent& p = path_sent_[path];
  if (p.named) return true;
  if (p.attempts >= kMaxSendAttempts) return true;  // the string area is full: its records read "(unnamed)"
  if (!p.ring_id) p.ring_id = sink_.new_name_id();
  const PathEntry* e = paths_->at(path);
  if (!sink_.send_name(p.ring_id, e->text, e->text_len)) {
    p.attempts++;
    return false;
  }
  p.named = true;
  return true;
}

bool Flusher::send_profile(uint32_t instrument, uint32_t frame, uint64_t ns, uint64_t count) {
  // extra: frame | samples << 32; more samples than 32 bits hold go in records of their own
  const uint64_t most = 0xFFFFFFFFull;
  bool ok = true;
  while (count > most) {
    ok &= sink_.write(GRAPHSIGNAL_REC_PROFILE_AGG, 0, 0, instrument, 0, frame | most << 32);
    count -= most;
  }
  return sink_.write(GRAPHSIGNAL_REC_PROFILE_AGG, 0, 0, instrument, ns, frame | count << 32) && ok;
}

uint32_t Flusher::counter_instrument(int problem) {
  if (problem_ids_[problem]) return problem_ids_[problem];
  char def[96];
  int n = snprintf(def, sizeof def, "counter\x1f%s\x1freason\x1e%s", kDroppedMetric, kProblemNames[problem]);
  uint32_t id = sink_.new_name_id();
  if (n > 0 && static_cast<size_t>(n) < sizeof def &&
      sink_.send_name(id, def, static_cast<size_t>(n), GRAPHSIGNAL_NAME_INSTRUMENT))
    problem_ids_[problem] = id;
  return problem_ids_[problem];
}

// -- the flush ------------------------------------------------------------------------
void Flusher::flush(bool closing) {
  std::lock_guard<std::mutex> g(flush_mu_);
  if (closed_) return;
  if (closing && !exited_) {
    uint64_t open = stacks_->open_now();
    if (open) problems_->count(kOpenAtExit, open);
  }
  uint32_t n = paths_->size();
  // What every thread's table and the shared sums hold beyond what was taken before.
  stacks_->harvest(n, pend_ns_, pend_count_);
  for (uint32_t i = 1; i < n; i++) {
    PathEntry* e = paths_->at(i);
    PathSent& p = path_sent_[i];
    uint64_t c = e->host_count.load(std::memory_order_relaxed), ns = e->host_ns.load(std::memory_order_relaxed);
    pend_count_[i] += c - p.host_count;
    pend_ns_[i] += ns - p.host_ns;
    p.host_count = c, p.host_ns = ns;
    uint64_t gc = e->gpu_count.load(std::memory_order_relaxed), gns = e->gpu_ns.load(std::memory_order_relaxed);
    bool host = pend_count_[i] || pend_ns_[i], gpu = gc != p.gpu_count || gns != p.gpu_ns;
    if (!host && !gpu) continue;
    // Names before the records that use them; what cannot be sent now (a
    // full ring) stays pending for the next flush.
    if (!send_instruments(e->domain) || !send_path(i)) continue;
    const DomainSent& d = domain_sent_[e->domain];
    if (host && send_profile(d.host_inst, p.ring_id, pend_ns_[i], pend_count_[i])) pend_count_[i] = pend_ns_[i] = 0;
    if (gpu && send_profile(d.gpu_inst, p.ring_id, gns - p.gpu_ns, gc - p.gpu_count)) p.gpu_count = gc, p.gpu_ns = gns;
  }
  int nd = domains_->size();
  for (int i = 0; i < kMaxDomains; i++) {
    if (i >= nd && i != kMaxDomains - 1) continue;
    uint64_t m = domains_->at(i)->marks.load(std::memory_order_relaxed);
    DomainSent& d = domain_sent_[i];
    if (m == d.marks || !send_instruments(i)) continue;
    if (sink_.write(GRAPHSIGNAL_REC_COUNTER, 0, 0, d.marks_inst, m - d.marks, 0)) d.marks = m;
  }
  for (int p = 0; p < kProblemCount; p++) {
    uint64_t v = problems_->total(static_cast<Problem>(p));
    if (v == sent_problems_[p]) continue;
    uint32_t id = counter_instrument(p);
    if (id && sink_.write(GRAPHSIGNAL_REC_COUNTER, 0, 0, id, v - sent_problems_[p], 0)) sent_problems_[p] = v;
  }
  if (closing) {
    exited_ = true;
    if (!more_coming_()) close_ring_locked();
  } else if (exited_ && !more_coming_()) {
    close_ring_locked();
  }
}

void Flusher::close_ring_locked() {
  if (closed_) return;
  closed_ = true;
  log(Level::kDebug, "exit: NVTX ranges in %u frames", paths_->size() - 1);
  sink_.close();
}

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
