#include "device_uuids.h"

#include <dlfcn.h>
#include <stdio.h>

#include <vector>

namespace graphsignal {
namespace cupti {

void DeviceUuids::attach_driver() {
  // RTLD_NOLOAD: CUDA loaded us, so libcuda is already there; never pull a
  // driver into a process that has none.
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return;
  get_count_ = reinterpret_cast<DeviceGetCountFn>(dlsym(h, "cuDeviceGetCount"));
  get_device_ = reinterpret_cast<DeviceGetFn>(dlsym(h, "cuDeviceGet"));
  get_uuid_ = reinterpret_cast<DeviceGetUuidFn>(dlsym(h, "cuDeviceGetUuid_v2"));
  if (!get_uuid_) get_uuid_ = reinterpret_cast<DeviceGetUuidFn>(dlsym(h, "cuDeviceGetUuid"));
  // The handle stays open: the functions are used until exit.
}

bool DeviceUuids::query(uint32_t ordinal, std::string* out) {
  if (!get_device_ || !get_uuid_) return false;
  int dev = 0;
  unsigned char bytes[16];
  if (get_device_(&dev, static_cast<int>(ordinal)) != 0) return false;  // CUDA_SUCCESS == 0
  if (get_uuid_(bytes, dev) != 0) return false;
  *out = format(bytes);
  return true;
}

bool DeviceUuids::resolve_all() {
  if (!get_count_) return true;  // no driver: nothing will ever resolve
  int n = 0;
  if (get_count_(&n) != 0) return false;  // not initialized yet
  std::vector<std::pair<uint32_t, std::string>> found;
  for (int i = 0; i < n; i++) {
    std::string u;
    if (query(static_cast<uint32_t>(i), &u)) found.emplace_back(static_cast<uint32_t>(i), u);
  }
  std::lock_guard<std::mutex> g(mu_);
  for (auto& kv : found) uuids_.emplace(kv.first, kv.second);
  return true;
}

std::string DeviceUuids::get(uint32_t ordinal) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = uuids_.find(ordinal);
    if (it != uuids_.end()) return it->second;
  }
  std::string u;
  if (!query(ordinal, &u)) return std::string();
  set(ordinal, u);
  return u;
}

void DeviceUuids::set(uint32_t ordinal, const std::string& uuid) {
  std::lock_guard<std::mutex> g(mu_);
  uuids_[ordinal] = uuid;
}

std::string DeviceUuids::format(const unsigned char b[16]) {
  char s[48];
  snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
           b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return std::string(s);
}

}  // namespace cupti
}  // namespace graphsignal
