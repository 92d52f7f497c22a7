#include "devices.h"

#include <string>

#include "log.h"

namespace graphsignal {
namespace cupti {

void Devices::announce(uint32_t device_id) {
  std::lock_guard<std::mutex> g(mu_);
  if (announced_[device_id].load(std::memory_order_relaxed)) return;
  std::string uuid = uuids_ ? uuids_->get(device_id) : std::string();
  if (!uuid.empty()) {
    uint32_t id = sink_->new_name_id();
    // A name that cannot be sent (string area or ring full) leaves the
    // device without its UUID tag, never without its records.
    if (id && (sink_->send_name(id, uuid.data(), uuid.size()) || sink_->send_name(id, uuid.data(), uuid.size())))
      sink_->write(GRAPHSIGNAL_REC_DEVICE, 0, static_cast<uint16_t>(device_id), id, 0, 0);
  } else {
    GS_LOG_ONCE(Level::kInfo, "no UUID for CUDA device %u; its metrics carry the device index only", device_id);
  }
  announced_[device_id].store(true, std::memory_order_release);
}

}  // namespace cupti
}  // namespace graphsignal
