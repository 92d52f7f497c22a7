// Device ordinal -> UUID string in NVML's format ("GPU-2c44f54a-9fd0-...")
// so the sidecar can join CUPTI's devices with NVML's.
//
// CUPTI records carry the CUDA device ordinal. The UUID comes from the
// driver already loaded in the process (cuDeviceGetUuid). CUPTI does not
// support driver calls from inside its callbacks, so resolve_all() runs on
// the library's own flush thread as soon as the driver is initialized; the
// translator only reads the table (and asks the driver itself only if a
// record ever arrives for a device not resolved yet).
#pragma once

#include <stdint.h>

#include <mutex>
#include <string>
#include <unordered_map>

namespace graphsignal {
namespace cupti {

class DeviceUuids {
 public:
  DeviceUuids() = default;

  // Looks the driver up in the process (never loads one). Tests skip this.
  void attach_driver();

  // Resolves every device the process can see; false while the driver is
  // not initialized yet (the caller retries).
  bool resolve_all();

  // The UUID, or "" when it cannot be known.
  std::string get(uint32_t ordinal);

  // For tests and for devices learned another way.
  void set(uint32_t ordinal, const std::string& uuid);

  // 16 raw bytes -> "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  static std::string format(const unsigned char bytes[16]);

 private:
  bool query(uint32_t ordinal, std::string* out);

  typedef int (*DeviceGetCountFn)(int*);
  typedef int (*DeviceGetFn)(int*, int);
  typedef int (*DeviceGetUuidFn)(void*, int);

  std::mutex mu_;  // guards uuids_; never held across a driver call
  std::unordered_map<uint32_t, std::string> uuids_;
  DeviceGetCountFn get_count_ = nullptr;
  DeviceGetFn get_device_ = nullptr;
  DeviceGetUuidFn get_uuid_ = nullptr;
};

}  // namespace cupti
}  // namespace graphsignal
