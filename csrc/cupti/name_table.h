// Interned strings (kernel symbols, graph names, device UUIDs) and their
// ring name ids. Each string is sent to the ring once, before the first
// record that uses its id. Not thread-safe: the translator's caller
// serializes (it runs on CUPTI's buffer-completion path, where a lock is
// allowed; no launch ever reaches this code).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>

#include "ring_sink.h"

namespace graphsignal {
namespace cupti {

class NameTable {
 public:
  explicit NameTable(RingSink* sink) : sink_(sink) {}

  // The id for these bytes; 0 only if the ring handed out no id.
  uint32_t id(const char* bytes, size_t len);
  uint32_t id(std::string_view s) { return id(s.data(), s.size()); }

  uint64_t send_failures() const { return send_failures_; }

 private:
  // A send can fail when the ring is momentarily full; later uses retry a
  // few times. The string area is a bump allocator, so retrying forever
  // would only burn it.
  static constexpr int kMaxSendAttempts = 4;

  struct Entry {
    uint32_t id;
    uint8_t attempts;
    bool sent;
  };

  void send(std::string_view key, Entry* e);

  RingSink* sink_;
  std::deque<std::string> storage_;  // owns the bytes the map's keys view; a deque never moves them
  std::unordered_map<std::string_view, Entry> map_;
  uint64_t send_failures_ = 0;
};

}  // namespace cupti
}  // namespace graphsignal
