// Where translated records go: the process's CUPTI ring (probe.h's writer).
// Every method is wait-free and callable from any thread (the translator
// and API callbacks on the workload's threads write to it); a full ring drops the record and counts it in
// the ring header, which the sidecar reports as graphsignal_dropped_records.
#pragma once

#include <graphsignal/probe.h>
#include <stddef.h>
#include <stdint.h>

namespace graphsignal {
namespace cupti {

class RingSink {
 public:
  explicit RingSink(graphsignal_ring_header* ring) : ring_(ring) {}

  // false when the ring was full (the record is counted as dropped)
  bool write(uint8_t type, uint8_t sub, uint16_t device, uint32_t name_id, uint64_t value, uint64_t extra) {
    return graphsignal_ring_write(ring_, type, sub, device, name_id, value, extra) != 0;
  }

  uint32_t new_name_id() { return graphsignal_ring_new_name_id(ring_); }

  // false when the string area or the ring was full
  bool send_name(uint32_t id, const char* bytes, size_t len, uint8_t kind = GRAPHSIGNAL_NAME_PLAIN) {
    return graphsignal_ring_send_name(ring_, id, kind, bytes, len) != 0;
  }

  // Records CUPTI itself dropped (no buffer to put them in) count with the
  // ring's own drops: both are activity the sidecar never saw.
  void add_dropped(uint64_t n) { __atomic_fetch_add(&ring_->dropped, n, __ATOMIC_RELAXED); }

  void close() { graphsignal_ring_close(ring_); }

  graphsignal_ring_header* ring() const { return ring_; }

 private:
  graphsignal_ring_header* ring_;
};

}  // namespace cupti
}  // namespace graphsignal
