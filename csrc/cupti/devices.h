// The ring's device announcements: before the first record of a device,
// one DEVICE record maps its ordinal to its UUID (decided once: sending
// the UUID later would split the device's series into "with" and
// "without" a UUID tag). Thread-safe: both the translator (activity
// records) and API callbacks on the workload's threads write records.
#pragma once

#include <stdint.h>

#include <atomic>
#include <mutex>

#include "device_uuids.h"
#include "ring_sink.h"

namespace graphsignal {
namespace cupti {

class Devices {
 public:
  static constexpr uint32_t kMax = 256;  // ordinals above share the last slot's fate: announced without a UUID

  Devices(RingSink* sink, DeviceUuids* uuids) : sink_(sink), uuids_(uuids) {}

  // The ordinal as the ring's 16-bit field, announced first if it is new.
  // One acquire load once a device is announced.
  uint16_t use(uint32_t device_id) {
    if (device_id >= kMax) device_id = kMax - 1;
    if (!announced_[device_id].load(std::memory_order_acquire)) announce(device_id);
    last_.store(device_id, std::memory_order_relaxed);
    return static_cast<uint16_t>(device_id);
  }

  // The device most recently used (the best guess for a context whose
  // device is unknown).
  uint32_t last() const { return last_.load(std::memory_order_relaxed); }

 private:
  void announce(uint32_t device_id);

  RingSink* sink_;
  DeviceUuids* uuids_;
  std::mutex mu_;  // first use of a device only; UUIDs are resolved before any record in practice
  std::atomic<bool> announced_[kMax] = {};
  std::atomic<uint32_t> last_{0};
};

}  // namespace cupti
}  // namespace graphsignal
