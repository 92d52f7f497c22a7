#include "call_tables.h"

#include <new>

namespace graphsignal {
namespace cupti {

namespace {
thread_local void* tl_table = nullptr;  // this thread's CallTables::Table (one CallTables per process)
thread_local bool tl_no_table = false;
}  // namespace

CallTables::Table* CallTables::table() {
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

bool CallTables::add(Kind kind, uint32_t sub, uint32_t src, uint32_t dst, uint32_t device, uint64_t ns,
                     uint64_t bytes) {
  if (sub > 31 || src > 7 || dst > 7 || device > 255) return false;
  Table* t = table();
  if (!t) return false;
  uint32_t bucket = kind == kSync ? 0 : static_cast<uint32_t>(CopyEstimator::bucket(bytes));
  uint32_t key = key_of(kind, sub, src, dst, device, bucket);
  uint32_t h = (key * 2654435761u) >> 26;  // 6 bits: kSlots
  for (int i = 0; i < kSlots; i++) {
    Slot& s = t->slots[(h + i) & (kSlots - 1)];
    uint32_t k = s.key.load(std::memory_order_relaxed);
    if (k != key) {
      if (k) continue;
      s.key.store(key, std::memory_order_release);  // this thread alone fills its table
    }
    // Single writer: plain stores, no read-modify-write.
    s.ns.store(s.ns.load(std::memory_order_relaxed) + ns, std::memory_order_relaxed);
    s.bytes.store(s.bytes.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
    s.calls.store(s.calls.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    return true;
  }
  return false;
}

void CallTables::flush() {
  std::lock_guard<std::mutex> g(flush_mu_);
  for (Table* t = tables_.load(std::memory_order_acquire); t; t = t->next) {
    for (Slot& s : t->slots) {
      uint32_t key = s.key.load(std::memory_order_acquire);
      if (!key) continue;
      uint64_t calls = s.calls.load(std::memory_order_acquire);
      uint64_t ns = s.ns.load(std::memory_order_relaxed), bytes = s.bytes.load(std::memory_order_relaxed);
      if (calls == s.sent_calls && ns == s.sent_ns && bytes == s.sent_bytes) continue;
      if (!send(key, calls - s.sent_calls, ns - s.sent_ns, bytes - s.sent_bytes)) continue;  // retried next flush
      s.sent_calls = calls, s.sent_ns = ns, s.sent_bytes = bytes;
    }
  }
}

bool CallTables::send(uint32_t key, uint64_t calls, uint64_t ns, uint64_t bytes) {
  Kind kind = static_cast<Kind>((key >> 1) & 3);
  uint8_t sub = static_cast<uint8_t>((key >> 3) & 31);
  uint32_t src = (key >> 8) & 7, dst = (key >> 11) & 7;
  uint16_t dev = static_cast<uint16_t>((key >> 14) & 255);
  if (kind != kSync) ns = estimate(kind, sub, src, dst, calls, bytes);
  // The calls field is 32 bits (16 for copies, beside the memory kinds):
  // more calls than fit go in records of their own, the sums in the last.
  const uint64_t most = kind == kMemcpy ? 0xFFFFu : 0xFFFFFFFFu;
  bool ok = true;
  while (calls > most) {
    ok &= write(kind, sub, src, dst, dev, most, 0, 0);
    calls -= most;
  }
  return write(kind, sub, src, dst, dev, calls, ns, bytes) && ok;
}

uint64_t CallTables::estimate(Kind kind, uint32_t sub, uint32_t src, uint32_t dst, uint64_t calls,
                              uint64_t bytes) const {
  if (!estimator_ || !calls) return 0;
  // calls of one size bucket: the mean size stands for each
  uint64_t each = kind == kMemcpy
      ? estimator_->estimate(static_cast<uint8_t>(sub),
                             CopyEstimator::memory_of(static_cast<uint8_t>(sub), static_cast<uint8_t>(src),
                                                      static_cast<uint8_t>(dst)),
                             bytes / calls)
      : estimator_->estimate(CopyEstimator::kMemset, static_cast<uint8_t>(sub), bytes / calls);
  return each * calls;
}

bool CallTables::write(Kind kind, uint8_t sub, uint32_t src, uint32_t dst, uint16_t dev, uint64_t calls,
                       uint64_t ns, uint64_t bytes) {
  switch (kind) {
    case kSync:
      return sink_->write(GRAPHSIGNAL_REC_SYNC_AGG, sub, dev, static_cast<uint32_t>(calls), ns, 0);
    case kMemcpy:
      return sink_->write(GRAPHSIGNAL_REC_MEMCPY_SAMPLED, sub, dev,
                          src | (dst << 8) | (static_cast<uint32_t>(calls) << 16), ns, bytes);
    default:
      return sink_->write(GRAPHSIGNAL_REC_MEMSET_SAMPLED, sub, dev, static_cast<uint32_t>(calls), ns, bytes);
  }
}

}  // namespace cupti
}  // namespace graphsignal
