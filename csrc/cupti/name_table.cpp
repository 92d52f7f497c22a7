#include "name_table.h"

namespace graphsignal {
namespace cupti {

uint32_t NameTable::id(const char* bytes, size_t len) {
  std::string_view probe(bytes, len);
  auto it = map_.find(probe);
  if (it != map_.end()) {
    if (!it->second.sent && it->second.attempts < kMaxSendAttempts) send(it->first, &it->second);
    return it->second.id;
  }
  storage_.emplace_back(bytes, len);
  std::string_view key(storage_.back());
  Entry e{sink_->new_name_id(), 0, false};
  send(key, &e);
  map_.emplace(key, e);
  return e.id;
}

void NameTable::send(std::string_view key, Entry* e) {
  e->attempts++;
  e->sent = sink_->send_name(e->id, key.data(), key.size());
  if (!e->sent) send_failures_++;
}

}  // namespace cupti
}  // namespace graphsignal
