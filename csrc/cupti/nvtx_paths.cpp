// Path interning (nvtx_paths.h): the lock-free per-thread cache in front
// of an open-addressing table under a mutex; bounded in count, depth and
// bytes, entries never freed while the process runs.
#include "nvtx_paths.h"

#include <string.h>

#include <new>

namespace graphsignal {
namespace cupti {
namespace nvtx {

namespace {

constexpr size_t kTableSize = 2 * kMaxPaths;  // open addressing over the named paths

uint64_t mix(uint64_t h, uint64_t a, uint64_t b) {
  h ^= a * 0x9E3779B97F4A7C15ull;
  h ^= b * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 31;
  return h * 0xD6E8FEB86659FD93ull;
}

char* copy_of(const char* s, size_t n) {
  char* p = new (std::nothrow) char[n + 1];
  if (p) {
    if (n) memcpy(p, s, n);
    p[n] = 0;
  }
  return p;
}

}  // namespace

PathTable::PathTable(Problems* problems) : problems_(problems) {
  paths_ = new (std::nothrow) PathEntry*[kPathSlots]();
  table_ = new (std::nothrow) PathEntry*[kTableSize]();
}

PathTable::~PathTable() {
  // The library's own table lives as long as the process; this is for tests.
  if (paths_) {
    for (uint32_t i = 1; i < n_paths_.load(std::memory_order_relaxed); i++) {
      delete[] paths_[i]->raw;
      delete[] paths_[i]->text;
      delete paths_[i];
    }
  }
  delete[] paths_;
  delete[] table_;
}

PathEntry* PathTable::make_path(uint16_t domain, uint32_t parent, PathKind kind, const char* raw, size_t raw_len) {
  uint32_t idx = n_paths_.load(std::memory_order_relaxed);
  if (idx >= kPathSlots) return nullptr;
  PathEntry* e = new (std::nothrow) PathEntry();
  if (!e) return nullptr;
  const PathEntry* pe = parent ? paths_[parent] : nullptr;
  char text[kMaxPathBytes + 8];
  size_t n = 0;
  if (pe) {
    memcpy(text, pe->text, pe->text_len);
    n = pe->text_len;
    text[n++] = '/';
  }
  if (kind == kDeeper) {
    memcpy(text + n, "...", 3);
    n += 3;
  } else if (kind == kOther) {
    memcpy(text, "(other)", 7);
    n = 7;
  } else if (raw_len == 0) {
    memcpy(text + n, "(no message)", 12);
    n += 12;
  } else {
    size_t room = n < kMaxPathBytes ? kMaxPathBytes - n : 0;
    size_t take = utf8_whole(raw, raw_len < room ? raw_len : room);
    n += sanitize(text + n, raw, take);
  }
  e->index = idx;
  e->parent = kind == kOther ? 0 : parent;
  e->domain = domain;
  e->kind = kind;
  e->depth = static_cast<uint8_t>(pe && kind != kOther ? pe->depth + 1 : 1);
  e->hash = raw ? hash_bytes(raw, raw_len) : 0;
  e->raw = copy_of(raw ? raw : "", raw_len);
  e->raw_len = static_cast<uint32_t>(raw_len);
  e->text = copy_of(text, n);
  e->text_len = static_cast<uint32_t>(n);
  if (!e->raw || !e->text) {
    delete[] e->raw;
    delete[] e->text;
    delete e;
    return nullptr;
  }
  paths_[idx] = e;
  n_paths_.store(idx + 1, std::memory_order_release);  // readers take entries below this
  return e;
}

uint32_t PathTable::other_path(uint16_t domain) {
  if (!other_[domain]) {
    PathEntry* e = make_path(domain, 0, kOther, nullptr, 0);
    if (e) other_[domain] = e->index;
  }
  return other_[domain];
}

uint32_t PathTable::lookup_slow(uint16_t domain, uint32_t parent, const Text& in) {
  // A name the caller did not cut or hash (its callers do both): cut and
  // hashed here, off the fast path. Such a name is never cached (its
  // length is not the entry's), so it always comes here.
  Text t = in;
  if (t.len > kMaxName) t.len = utf8_whole(t.bytes, kMaxName), t.hash = 0;
  if (!t.hash) t.hash = hash_bytes(t.bytes, t.len);
  std::lock_guard<std::mutex> g(mu_);
  PathEntry* pe = parent ? paths_[parent] : nullptr;
  if (pe && pe->kind == kDeeper) return parent;
  if (pe && pe->depth >= kMaxPathDepth) {
    uint32_t deeper = pe->deeper.load(std::memory_order_relaxed);
    if (!deeper) {
      PathEntry* e = make_path(domain, parent, kDeeper, nullptr, 0);
      if (!e) return parent;
      deeper = e->index;
      pe->deeper.store(deeper, std::memory_order_release);
    }
    return deeper;
  }
  size_t mask = kTableSize - 1;
  size_t i = static_cast<size_t>(mix(t.hash, parent, domain)) & mask;
  for (size_t k = 0; k < kTableSize; k++, i = (i + 1) & mask) {
    PathEntry* e = table_[i];
    if (!e) break;
    if (e->hash == t.hash && e->parent == parent && e->domain == domain && e->raw_len == t.len &&
        !memcmp(e->raw, t.bytes, t.len))
      return e->index;
  }
  if (n_named_ >= kMaxPaths) {
    problems_->count(kNamesOverCap);
    return other_path(domain);
  }
  PathEntry* e = make_path(domain, parent, kNamed, t.bytes, t.len);
  if (!e) return other_path(domain);
  table_[i] = e;  // i: the free slot the probe stopped at (the table is never more than half full)
  n_named_++;
  return e->index;
}

uint32_t PathTable::lookup(PathCache* cache, uint16_t domain, uint32_t parent, const Text& t) {
  if (parent) {
    // a parent at the depth cap: its children fold into "<parent>/..." (made once, then read here)
    const PathEntry* pe = paths_[parent];
    if (pe->kind == kDeeper) return parent;
    if (pe->depth >= kMaxPathDepth) {
      uint32_t deeper = pe->deeper.load(std::memory_order_acquire);
      if (deeper) return deeper;
    }
  }
  PathCache::Slot* c = nullptr;
  if (cache) {
    c = &cache->slots[mix(t.hash, parent, domain) & (PathCache::kSlots - 1)];
    const PathEntry* e = c->entry;
    if (e && c->hash == t.hash && c->parent == parent && c->domain == domain && c->len == t.len &&
        !memcmp(e->raw, t.bytes, t.len))
      return e->index;
  }
  uint32_t idx = lookup_slow(domain, parent, t);
  const PathEntry* e = paths_[idx];
  if (c && e && e->kind == kNamed && e->parent == parent && e->raw_len == t.len) {
    c->hash = t.hash;
    c->parent = parent;
    c->domain = domain;
    c->len = static_cast<uint16_t>(t.len);
    c->entry = e;
  }
  return idx;
}

void PathTable::add_host(uint32_t path, uint64_t ns) {
  PathEntry* e = paths_[path];
  e->host_ns.fetch_add(ns, std::memory_order_relaxed);
  e->host_count.fetch_add(1, std::memory_order_relaxed);
}

void PathTable::add_gpu(uint32_t path, uint64_t ns) {
  if (!path || path >= n_paths_.load(std::memory_order_acquire)) return;
  PathEntry* e = paths_[path];
  e->gpu_ns.fetch_add(ns, std::memory_order_relaxed);
  e->gpu_count.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
