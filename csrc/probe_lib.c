/* libgraphsignal_probes.so: probe.h's Python-facing functions as plain C
 * exports, for graphsignal.probes under an interpreter that cannot load
 * the cffi helper (graphsignal installed for another Python, e.g. by
 * `uv tool install`, and the workload's Python lacks cffi). ctypes loads
 * it; the record path is probe.h's own, as in the cffi helper. */
#include <graphsignal/probe.h>

#define GS_PY_EXPORT __attribute__((visibility("default")))

/* GRAPHSIGNAL_GAUGE, _COUNTER, _HISTOGRAM, _PROFILE */
GS_PY_EXPORT const int graphsignal_py_types[4] = {GRAPHSIGNAL_GAUGE, GRAPHSIGNAL_COUNTER, GRAPHSIGNAL_HISTOGRAM,
                                                  GRAPHSIGNAL_PROFILE};

GS_PY_EXPORT graphsignal_probe_entry* graphsignal_py_register(const char* name, int type, const char** tag_keys,
                                                              const char** tag_values, size_t ntags) {
  return graphsignal_probe_register(name, (graphsignal_probe_type)type, tag_keys, tag_values, ntags);
}

GS_PY_EXPORT void graphsignal_py_record(graphsignal_probe_entry* e, uint64_t value) { graphsignal_record(e, value); }

GS_PY_EXPORT void graphsignal_py_add(graphsignal_probe_entry* e, uint64_t delta) { graphsignal_add(e, delta); }

GS_PY_EXPORT void graphsignal_py_set(graphsignal_probe_entry* e, double value) { graphsignal_set(e, value); }

GS_PY_EXPORT void graphsignal_py_profile_add(graphsignal_probe_entry* e, const char* frame, uint64_t value) {
  graphsignal_profile_add_by_name(e, frame, value);
}

GS_PY_EXPORT int graphsignal_py_type_of(const graphsignal_probe_entry* e) { return graphsignal_probe_type_of(e); }

GS_PY_EXPORT uint64_t graphsignal_py_now_ns(void) { return graphsignal_now_ns(); }
