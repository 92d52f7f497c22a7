// The NVTX side of the library's exported surface: InitializeInjectionNvtx2,
// which NVTX calls when NVTX_INJECTION64_PATH names this library
// (graphsignal-run sets it beside CUDA_INJECTION64_PATH, unless the user set
// one, e.g. Nsight Systems). Each copy of NVTX in the process (every library
// built with the header-only NVTX v3, and libnvToolsExt) calls it once, on
// its own first NVTX call, with its own function tables: the handlers below
// go into each, the collection state (nvtx_ranges.h) is the process's one.
//
// Why this entry point and not CUPTI's NVTX callback domain: that domain
// needs NVTX_INJECTION64_PATH to name libcupti itself and CUPTI's one
// callback subscriber (ours, when the collector runs), so it works only once
// CUDA has loaded CUPTI, and every range then pays CUPTI's dispatch. Here
// NVTX calls our handlers directly, whether or not the process uses CUDA.
//
// Without the NVTX headers at build time (csrc/cupti_build.py looks for
// nvtx3/ in the toolkit and the nvidia-nvtx wheel) this file is empty and
// the library exports no NVTX entry point.
#if defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>)
#define GRAPHSIGNAL_HAVE_NVTX 1
#endif
#endif

#ifdef GRAPHSIGNAL_HAVE_NVTX
#define NVTX_NO_IMPL  // the types only: this is the tool side
#include <nvtx3/nvToolsExt.h>
#include <stddef.h>
#include <string.h>
#include <wchar.h>

#include "nvtx_ranges.h"

namespace {

using graphsignal::cupti::nvtx::Domain;
using graphsignal::cupti::nvtx::kMaxName;
using graphsignal::cupti::nvtx::kNameTruncated;
using graphsignal::cupti::nvtx::Ranges;
using graphsignal::cupti::nvtx::Text;

thread_local char tl_wide[kMaxName + 4];  // a wide message as UTF-8

// Up to kMaxName bytes of a C string (strnlen never reads further).
Text ascii_text(Ranges* r, const char* s) {
  if (!s) return Text{"", 0, 0};
  size_t n = strnlen(s, kMaxName + 1);
  if (n > kMaxName) {
    r->count(kNameTruncated);
    n = kMaxName;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) n--;  // a whole character
  }
  return Text{s, n, 0};
}

// A wide (UTF-32) message as UTF-8 in this thread's buffer, cut at kMaxName bytes.
Text wide_text(Ranges* r, const wchar_t* w) {
  if (!w) return Text{"", 0, 0};
  size_t n = 0;
  for (; *w; w++) {
    uint32_t c = static_cast<uint32_t>(*w);
    if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = '?';
    size_t need = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    if (n + need > kMaxName) {
      r->count(kNameTruncated);
      break;
    }
    if (need == 1) {
      tl_wide[n++] = static_cast<char>(c);
    } else if (need == 2) {
      tl_wide[n++] = static_cast<char>(0xC0 | (c >> 6));
      tl_wide[n++] = static_cast<char>(0x80 | (c & 0x3F));
    } else if (need == 3) {
      tl_wide[n++] = static_cast<char>(0xE0 | (c >> 12));
      tl_wide[n++] = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      tl_wide[n++] = static_cast<char>(0x80 | (c & 0x3F));
    } else {
      tl_wide[n++] = static_cast<char>(0xF0 | (c >> 18));
      tl_wide[n++] = static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      tl_wide[n++] = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      tl_wide[n++] = static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return Text{tl_wide, n, 0};
}

// The message of event attributes: ASCII, Unicode or a registered string;
// none (an empty name) when the attributes carry no message.
Text attrib_text(Ranges* r, const nvtxEventAttributes_t* a) {
  if (!a || a->size < offsetof(nvtxEventAttributes_t, message) + sizeof a->message) return Text{"", 0, 0};
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      return ascii_text(r, a->message.ascii);
    case NVTX_MESSAGE_TYPE_UNICODE:
      return wide_text(r, a->message.unicode);
    case NVTX_MESSAGE_TYPE_REGISTERED: {
      Text t;
      if (r->text_of(a->message.registered, &t)) return t;
      return Text{"", 0, 0};
    }
    default:
      return Text{"", 0, 0};
  }
}

// -- the core module (default domain) ---------------------------------------------
void NVTX_API mark_ex(const nvtxEventAttributes_t*) {
  if (Ranges* r = Ranges::get()) r->mark(r->default_domain());
}
void NVTX_API mark_a(const char*) {
  if (Ranges* r = Ranges::get()) r->mark(r->default_domain());
}
void NVTX_API mark_w(const wchar_t*) {
  if (Ranges* r = Ranges::get()) r->mark(r->default_domain());
}

nvtxRangeId_t NVTX_API range_start_ex(const nvtxEventAttributes_t* a) {
  Ranges* r = Ranges::get();
  if (!r) return 0;
  Text t = attrib_text(r, a);
  return r->start_range(r->default_domain(), &t);
}
nvtxRangeId_t NVTX_API range_start_a(const char* s) {
  Ranges* r = Ranges::get();
  if (!r) return 0;
  Text t = ascii_text(r, s);
  return r->start_range(r->default_domain(), &t);
}
nvtxRangeId_t NVTX_API range_start_w(const wchar_t* s) {
  Ranges* r = Ranges::get();
  if (!r) return 0;
  Text t = wide_text(r, s);
  return r->start_range(r->default_domain(), &t);
}
void NVTX_API range_end(nvtxRangeId_t id) {
  if (Ranges* r = Ranges::get()) r->end_range(id);
}

int NVTX_API range_push_ex(const nvtxEventAttributes_t* a) {
  Ranges* r = Ranges::get();
  if (!r) return -1;
  Text t = attrib_text(r, a);
  return r->push(r->default_domain(), &t);
}
int NVTX_API range_push_a(const char* s) {
  Ranges* r = Ranges::get();
  if (!r) return -1;
  Text t = ascii_text(r, s);
  return r->push(r->default_domain(), &t);
}
int NVTX_API range_push_w(const wchar_t* s) {
  Ranges* r = Ranges::get();
  if (!r) return -1;
  Text t = wide_text(r, s);
  return r->push(r->default_domain(), &t);
}
int NVTX_API range_pop() {
  Ranges* r = Ranges::get();
  return r ? r->pop(r->default_domain()) : -1;
}

// -- the core2 module (domains) -----------------------------------------------------
void NVTX_API domain_mark_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t*) {
  if (Ranges* r = Ranges::get()) r->mark(r->checked(d));
}
nvtxRangeId_t NVTX_API domain_range_start_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  Ranges* r = Ranges::get();
  if (!r) return 0;
  Text t = attrib_text(r, a);
  return r->start_range(r->checked(d), &t);
}
void NVTX_API domain_range_end(nvtxDomainHandle_t, nvtxRangeId_t id) {
  if (Ranges* r = Ranges::get()) r->end_range(id);
}
int NVTX_API domain_range_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  Ranges* r = Ranges::get();
  if (!r) return -1;
  Text t = attrib_text(r, a);
  return r->push(r->checked(d), &t);
}
int NVTX_API domain_range_pop(nvtxDomainHandle_t d) {
  Ranges* r = Ranges::get();
  return r ? r->pop(r->checked(d)) : -1;
}
nvtxStringHandle_t NVTX_API domain_register_string_a(nvtxDomainHandle_t d, const char* s) {
  Ranges* r = Ranges::get();
  if (!r || !s) return nullptr;
  Text t = ascii_text(r, s);
  return reinterpret_cast<nvtxStringHandle_t>(r->register_string(r->checked(d), t.bytes, t.len));
}
nvtxStringHandle_t NVTX_API domain_register_string_w(nvtxDomainHandle_t d, const wchar_t* s) {
  Ranges* r = Ranges::get();
  if (!r || !s) return nullptr;
  Text t = wide_text(r, s);
  return reinterpret_cast<nvtxStringHandle_t>(r->register_string(r->checked(d), t.bytes, t.len));
}
nvtxDomainHandle_t NVTX_API domain_create_a(const char* name) {
  Ranges* r = Ranges::get();
  if (!r) return nullptr;
  Text t = ascii_text(r, name);
  return reinterpret_cast<nvtxDomainHandle_t>(name ? r->domain(t.bytes, t.len) : r->default_domain());
}
nvtxDomainHandle_t NVTX_API domain_create_w(const wchar_t* name) {
  Ranges* r = Ranges::get();
  if (!r) return nullptr;
  Text t = wide_text(r, name);
  return reinterpret_cast<nvtxDomainHandle_t>(name ? r->domain(t.bytes, t.len) : r->default_domain());
}
void NVTX_API domain_destroy(nvtxDomainHandle_t) {
  // Domains are kept by name (a later create of the same name gets the same
  // handle), so a create/destroy loop cannot use up kMaxDomains.
}

struct Slot {
  unsigned int cbid;
  NvtxFunctionPointer fn;
};

template <typename F>
NvtxFunctionPointer fp(F f) {
  return reinterpret_cast<NvtxFunctionPointer>(f);
}

// Puts the handlers into one module's table of one NVTX instance; false when
// the instance has no such table.
bool install(const NvtxExportTableCallbacks* cb, NvtxCallbackModule module, const Slot* slots, size_t n) {
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!cb->GetModuleFunctionTable(module, &table, &size) || !table) return false;
  for (size_t i = 0; i < n; i++)
    if (slots[i].cbid < size && table[slots[i].cbid]) *table[slots[i].cbid] = slots[i].fn;
  return true;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
  // 0 tells this NVTX instance to make its calls no-ops: outside
  // graphsignal-run, with GRAPHSIGNAL_NVTX=off, without a ring.
  if (!get) return 0;
  const auto* cb = static_cast<const NvtxExportTableCallbacks*>(get(NVTX_ETID_CALLBACKS));
  if (!cb || cb->struct_size < sizeof(NvtxExportTableCallbacks) || !cb->GetModuleFunctionTable) return 0;
  if (!Ranges::start()) return 0;
  const Slot core[] = {
      {NVTX_CBID_CORE_MarkEx, fp(mark_ex)},
      {NVTX_CBID_CORE_MarkA, fp(mark_a)},
      {NVTX_CBID_CORE_MarkW, fp(mark_w)},
      {NVTX_CBID_CORE_RangeStartEx, fp(range_start_ex)},
      {NVTX_CBID_CORE_RangeStartA, fp(range_start_a)},
      {NVTX_CBID_CORE_RangeStartW, fp(range_start_w)},
      {NVTX_CBID_CORE_RangeEnd, fp(range_end)},
      {NVTX_CBID_CORE_RangePushEx, fp(range_push_ex)},
      {NVTX_CBID_CORE_RangePushA, fp(range_push_a)},
      {NVTX_CBID_CORE_RangePushW, fp(range_push_w)},
      {NVTX_CBID_CORE_RangePop, fp(range_pop)},
  };
  const Slot core2[] = {
      {NVTX_CBID_CORE2_DomainMarkEx, fp(domain_mark_ex)},
      {NVTX_CBID_CORE2_DomainRangeStartEx, fp(domain_range_start_ex)},
      {NVTX_CBID_CORE2_DomainRangeEnd, fp(domain_range_end)},
      {NVTX_CBID_CORE2_DomainRangePushEx, fp(domain_range_push_ex)},
      {NVTX_CBID_CORE2_DomainRangePop, fp(domain_range_pop)},
      {NVTX_CBID_CORE2_DomainRegisterStringA, fp(domain_register_string_a)},
      {NVTX_CBID_CORE2_DomainRegisterStringW, fp(domain_register_string_w)},
      {NVTX_CBID_CORE2_DomainCreateA, fp(domain_create_a)},
      {NVTX_CBID_CORE2_DomainCreateW, fp(domain_create_w)},
      {NVTX_CBID_CORE2_DomainDestroy, fp(domain_destroy)},
  };
  if (!install(cb, NVTX_CB_MODULE_CORE, core, sizeof core / sizeof *core)) return 0;
  install(cb, NVTX_CB_MODULE_CORE2, core2, sizeof core2 / sizeof *core2);  // NVTX 1 instances have none
  return 1;
}
#endif  // GRAPHSIGNAL_HAVE_NVTX
