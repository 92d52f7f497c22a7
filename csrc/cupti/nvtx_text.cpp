// A message's bytes (nvtx_text.h): the hash, the cut at a whole UTF-8
// character, the frame's sanitizing. Reads only [s, s + len).
#include "nvtx_text.h"

#include <string.h>

namespace graphsignal {
namespace cupti {
namespace nvtx {

uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  if (n) memcpy(&w, p, n);
  h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 29;
  return h | 1;  // 0 means "not computed"
}

size_t utf8_whole(const char* s, size_t len) {
  size_t i = len, back = 0;
  while (i > 0 && back < 4 && (static_cast<uint8_t>(s[i - 1]) & 0xC0) == 0x80) i--, back++;
  if (i == 0) return len;
  uint8_t lead = static_cast<uint8_t>(s[i - 1]);
  size_t need = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 1;
  return (i - 1) + need > len ? i - 1 : len;
}

size_t sanitize(char* out, const char* in, size_t len) {
  for (size_t i = 0; i < len; i++) {
    uint8_t c = static_cast<uint8_t>(in[i]);
    out[i] = c < 0x20 || c == 0x7f ? '?' : c == '/' ? '|' : static_cast<char>(c);
  }
  return len;
}

}  // namespace nvtx
}  // namespace cupti
}  // namespace graphsignal
