// A message as NVTX passed it, and the byte-level rules every NVTX room
// applies to one: its hash, where a cut falls, what a frame may show.
//
// Guards against: a cut that splits a UTF-8 character (the sidecar would
// read a broken name), control bytes and '/' inside a name (a '/' would
// read as one more level of the frame's path), and a hash of 0 (the
// "not computed yet" mark). No allocation, no lock, no CUDA.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace graphsignal {
namespace cupti {
namespace nvtx {

// Bytes (a cut copy for wide strings) and, once computed, their hash.
struct Text {
  const char* bytes;
  size_t len;
  uint64_t hash;  // 0: not computed yet
};

// Never 0.
uint64_t hash_bytes(const char* p, size_t n);

// len cut back to the last whole UTF-8 character of s[0, len).
size_t utf8_whole(const char* s, size_t len);

// in[0, len) as a frame shows a name: control bytes as '?', '/' as '|'.
// Returns len (out holds len bytes).
size_t sanitize(char* out, const char* in, size_t len);

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
