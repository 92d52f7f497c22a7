// Domains and registered strings (nvtx_domains.h): made under a mutex,
// handed out as pointers into fixed arrays, checked when they come back.
#include "nvtx_domains.h"

#include <string.h>

#include <new>

namespace graphsignal {
namespace cupti {
namespace nvtx {

DomainTable::DomainTable(Problems* problems) : problems_(problems) {
  domains_ = new (std::nothrow) Domain[kMaxDomains];
  if (!domains_) return;
  for (int i = 0; i < kMaxDomains; i++) domains_[i].index = i;
  memcpy(domains_[0].name, "default", 7);
  domains_[0].len = 7;
  memcpy(domains_[kMaxDomains - 1].name, "(other)", 7);
  domains_[kMaxDomains - 1].len = 7;
}

Domain* DomainTable::checked(const void* handle) {
  if (!handle) return &domains_[0];
  auto p = reinterpret_cast<uintptr_t>(handle), base = reinterpret_cast<uintptr_t>(domains_);
  if (p < base || p >= base + sizeof(Domain) * kMaxDomains || (p - base) % sizeof(Domain)) return &domains_[0];
  return const_cast<Domain*>(static_cast<const Domain*>(handle));
}

Domain* DomainTable::domain(const char* utf8, size_t len) {
  if (!utf8) return &domains_[0];
  char name[sizeof(Domain::name)];
  len = utf8_whole(utf8, len < sizeof name ? len : sizeof name);
  sanitize(name, utf8, len);
  std::lock_guard<std::mutex> g(mu_);
  int n = n_.load(std::memory_order_relaxed);
  for (int i = 1; i < n; i++)
    if (domains_[i].len == len && !memcmp(domains_[i].name, name, len)) return &domains_[i];
  if (n >= kMaxDomains - 1) {
    problems_->count(kDomainsOverCap);
    return &domains_[kMaxDomains - 1];
  }
  memcpy(domains_[n].name, name, len);
  domains_[n].len = static_cast<uint32_t>(len);
  n_.store(n + 1, std::memory_order_release);
  return &domains_[n];
}

StringReg* DomainTable::register_string(Domain* d, const char* utf8, size_t len) {
  if (len > kMaxName) len = utf8_whole(utf8, kMaxName);
  uint64_t h = hash_bytes(utf8, len);
  std::lock_guard<std::mutex> g(mu_);
  StringReg* strings = strings_.load(std::memory_order_relaxed);
  if (!strings) {
    strings = new (std::nothrow) StringReg[kMaxStrings + 1];
    if (!strings) return nullptr;
    StringReg& other = strings[kMaxStrings];
    memcpy(other.bytes, "(other)", 7);
    other.len = 7;
    other.hash = hash_bytes(other.bytes, 7);
    other.domain = 0;
    strings_.store(strings, std::memory_order_release);
  }
  uint16_t dom = static_cast<uint16_t>(d->index);
  for (uint32_t i = 0; i < n_strings_; i++) {  // registrations are rare and few: a scan keeps them unique
    StringReg& s = strings[i];
    if (s.hash == h && s.len == len && s.domain == dom && !memcmp(s.bytes, utf8, len)) return &s;
  }
  if (n_strings_ >= kMaxStrings) {
    problems_->count(kStringsOverCap);
    return &strings[kMaxStrings];
  }
  StringReg& s = strings[n_strings_];
  memcpy(s.bytes, utf8, len);
  s.len = static_cast<uint32_t>(len);
  s.hash = h;
  s.domain = dom;
  n_strings_++;
  return &s;
}

bool DomainTable::text_of(const void* handle, Text* out) {
  // set once, before any handle into it was handed out
  const StringReg* base = strings_.load(std::memory_order_acquire);
  auto p = reinterpret_cast<uintptr_t>(handle), b = reinterpret_cast<uintptr_t>(base);
  if (!base || p < b || p >= b + sizeof(StringReg) * (kMaxStrings + 1) || (p - b) % sizeof(StringReg)) return false;
  const StringReg* s = static_cast<const StringReg*>(handle);
  out->bytes = s->bytes;
  out->len = s->len;
  out->hash = s->hash;
  return true;
}

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
