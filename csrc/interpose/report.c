/* GRAPHSIGNAL_INTERPOSE_REPORT=PREFIX: at exit the interposer writes what it
 * counted to PREFIX.<pid>.json: the calls per hooked entry point, which
 * cuGetProcAddress answers it bound and how, and the counts per kernel,
 * graph, synchronization, copy kind (and host memory) and memset. A diagnosis and the
 * tests' view of the counters; nothing is written without the variable,
 * and the workload's own output is never touched. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "counters.h"
#include "hostmem.h"
#include "interpose.h"

#define MAX_LOOKUPS 1024

typedef struct {
  char symbol[64];
  char row[48];
  int version, how;
  uint64_t flags;
} lookup;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static lookup g_lookups[MAX_LOOKUPS];
static int g_n_lookups, g_lookups_dropped;
static char g_prefix[512];

void gs_interpose_note_lookup(const char* symbol, int version, uint64_t flags, const char* row, int how) {
  pthread_mutex_lock(&g_mu);
  if (g_n_lookups < MAX_LOOKUPS) {
    lookup* l = &g_lookups[g_n_lookups++];
    snprintf(l->symbol, sizeof l->symbol, "%s", symbol);
    snprintf(l->row, sizeof l->row, "%s", row ? row : "");
    l->version = version, l->flags = flags, l->how = how;
  } else {
    g_lookups_dropped++;
  }
  pthread_mutex_unlock(&g_mu);
}

static void put_string(FILE* f, const char* s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20 || c >= 0x7f) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

static void put_table(FILE* f, const char* key, gs_table* t, int sampled) {
  uint32_t i;
  int first = 1;
  fprintf(f, ",\"%s\":[", key);
  for (i = 0; i < GS_TABLE_SIZE; i++) {
    gs_slot* s = &t->slots[i];
    uint64_t n = __atomic_load_n(&s->count, __ATOMIC_RELAXED);
    const char* name = __atomic_load_n(&s->name, __ATOMIC_ACQUIRE);
    if (!__atomic_load_n(&s->key, __ATOMIC_ACQUIRE) || !n) continue;
    fprintf(f, "%s{\"name\":", first ? "" : ",");
    put_string(f, name ? name : "(unnamed)");
    fprintf(f, ",\"count\":%llu", (unsigned long long)n);
    if (sampled)
      fprintf(f, ",\"sampled_n\":%llu,\"sampled_ns\":%llu,\"sampled_raw_ns\":%llu,\"sampled_idle\":%llu",
              (unsigned long long)__atomic_load_n(&s->sampled_n, __ATOMIC_RELAXED),
              (unsigned long long)__atomic_load_n(&s->sampled_ns, __ATOMIC_RELAXED),
              (unsigned long long)__atomic_load_n(&s->sampled_raw_ns, __ATOMIC_RELAXED),
              (unsigned long long)__atomic_load_n(&s->sampled_idle, __ATOMIC_RELAXED));
    fputc('}', f);
    first = 0;
  }
  fprintf(f, "],\"%s_overflow\":%llu", key, (unsigned long long)__atomic_load_n(&t->overflow, __ATOMIC_RELAXED));
}

/* The per-device counters summed (the report's counts are the process's). */
static void totals(gs_device_counters* t) {
  int d, i;
  memset(t, 0, sizeof *t);
  for (d = 0; d < GS_MAX_DEVICES; d++) {
    gs_device_counters* c = &gs_state.dev[d];
    for (i = 0; i < GS_SYNC_KINDS; i++) {
      t->syncs[i].calls += __atomic_load_n(&c->syncs[i].calls, __ATOMIC_RELAXED);
      t->syncs[i].ticks += __atomic_load_n(&c->syncs[i].ticks, __ATOMIC_RELAXED);
    }
    for (i = 0; i < GS_COPY_KINDS * GS_MEM_CLASSES * GS_MEM_CLASSES; i++) {
      gs_bytes_counter* from = &c->copies[0][0][0] + i;
      gs_bytes_counter* to = &t->copies[0][0][0] + i;
      to->calls += __atomic_load_n(&from->calls, __ATOMIC_RELAXED);
      to->bytes += __atomic_load_n(&from->bytes, __ATOMIC_RELAXED);
    }
    t->memsets.calls += __atomic_load_n(&c->memsets.calls, __ATOMIC_RELAXED);
    t->memsets.bytes += __atomic_load_n(&c->memsets.bytes, __ATOMIC_RELAXED);
  }
}

/* ,"copies_host_memory":{"<kind>":{"<host memory>":[calls,bytes]}}: the
 * host side's class as the payload tags it ("pinned", "pageable",
 * "managed"; both sides of a host-to-host copy as "<src>+<dst>" where they
 * differ; "unknown" where the registry could not say, "none" for kinds
 * without a host side), and the registry's state. */
static void put_host_memory(FILE* f, const gs_device_counters* all) {
  int i, sc, dc, first = 1;
  gs_hostmem_stats st;
  fprintf(f, ",\"copies_host_memory\":{");
  for (i = 0; i < GS_COPY_KINDS; i++) {
    int host_src = i == GS_COPY_HTOD || i == GS_COPY_HTOH, host_dst = i == GS_COPY_DTOH || i == GS_COPY_HTOH;
    int inner = 0;
    for (sc = 0; sc < GS_MEM_CLASSES; sc++) {
      for (dc = 0; dc < GS_MEM_CLASSES; dc++) {
        const gs_bytes_counter* k = &all->copies[i][sc][dc];
        char name[40];
        if (!k->calls) continue;
        if (host_src && host_dst && sc != dc)
          snprintf(name, sizeof name, "%s+%s", gs_hostmem_class_name(sc), gs_hostmem_class_name(dc));
        else if (host_src || host_dst)
          snprintf(name, sizeof name, "%s", gs_hostmem_class_name(host_src ? sc : dc));
        else
          snprintf(name, sizeof name, "none");
        if (!inner) fprintf(f, "%s\"%d\":{", first ? "" : ",", i);
        fprintf(f, "%s\"%s\":[%llu,%llu]", inner ? "," : "", name, (unsigned long long)k->calls,
                (unsigned long long)k->bytes);
        inner = 1;
        first = 0;
      }
    }
    if (inner) fputc('}', f);
  }
  gs_hostmem_get_stats(&st);
  fprintf(f, "},\"hostmem\":{\"ranges\":%u,\"unrecorded\":%u,\"unsure\":%u,\"overflows\":%llu,\"gave_up\":%llu}",
          st.ranges, st.unrecorded, st.unsure, (unsigned long long)st.overflows, (unsigned long long)st.gave_up);
}

/* ,"devices_seen":N (gs_devices_known: 1 where every count went to
 * ordinal 0 without asking), "per_device":{"<ordinal>":{...}}: the
 * calls counted on each device that has any. */
static void put_devices(FILE* f) {
  int d, i, first = 1;
  fprintf(f, ",\"devices_seen\":%d,\"per_device\":{", gs_devices_known());
  for (d = 0; d < GS_MAX_DEVICES; d++) {
    const gs_device_counters* c = &gs_state.dev[d];
    unsigned long long copies = 0, syncs = 0;
    for (i = 0; i < GS_COPY_KINDS * GS_MEM_CLASSES * GS_MEM_CLASSES; i++)
      copies += __atomic_load_n(&(&c->copies[0][0][0] + i)->calls, __ATOMIC_RELAXED);
    for (i = 0; i < GS_SYNC_KINDS; i++) syncs += __atomic_load_n(&c->syncs[i].calls, __ATOMIC_RELAXED);
    if (!copies && !syncs && !__atomic_load_n(&c->memsets.calls, __ATOMIC_RELAXED)) continue;
    fprintf(f, "%s\"%d\":{\"stream_syncs\":%llu,\"context_syncs\":%llu,\"copies\":%llu,\"memsets\":%llu}",
            first ? "" : ",", d, (unsigned long long)__atomic_load_n(&c->syncs[GS_SYNC_STREAM].calls, __ATOMIC_RELAXED),
            (unsigned long long)__atomic_load_n(&c->syncs[GS_SYNC_CONTEXT].calls, __ATOMIC_RELAXED), copies,
            (unsigned long long)__atomic_load_n(&c->memsets.calls, __ATOMIC_RELAXED));
    first = 0;
  }
  fputc('}', f);
}

static void write_report(void) {
  gs_device_counters all;
  char path[600], tmp[620];
  FILE* f;
  int i, first;
  static const char* sync_names[GS_SYNC_KINDS] = {"", "event", "", "stream", "context", "copy"};
  if (!g_prefix[0]) return;
  totals(&all);
  snprintf(path, sizeof path, "%s.%ld.json", g_prefix, (long)getpid());
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  {
    /* a new file of ours (0600): never written through a name another
     * local user made first, or a symlink they planted there */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return;
    f = fdopen(fd, "w");
    if (!f) {
      close(fd);
      unlink(tmp);
      return;
    }
  }
  fprintf(f, "{\"pid\":%ld,\"rows\":[", (long)getpid());
  for (i = 0; i < gs_interpose_rows(); i++)
    fprintf(f, "%s{\"name\":\"%s\",\"calls\":%llu,\"bound\":%d}", i ? "," : "", gs_interpose_row_name(i),
            (unsigned long long)gs_interpose_row_calls(i), gs_interpose_row_bound(i));
  fprintf(f, "],\"lookups\":[");
  pthread_mutex_lock(&g_mu);
  for (i = 0; i < g_n_lookups; i++) {
    fprintf(f, "%s{\"symbol\":", i ? "," : "");
    put_string(f, g_lookups[i].symbol);
    fprintf(f, ",\"version\":%d,\"flags\":%llu,\"row\":", g_lookups[i].version,
            (unsigned long long)g_lookups[i].flags);
    put_string(f, g_lookups[i].row);
    fprintf(f, ",\"how\":%d}", g_lookups[i].how);
  }
  fprintf(f, "],\"lookups_dropped\":%d", g_lookups_dropped);
  pthread_mutex_unlock(&g_mu);
  put_table(f, "kernels", &gs_state.kernels, 0);
  put_table(f, "graphs", &gs_state.graphs, 1);
  fprintf(f, ",\"syncs\":{");
  for (i = 1, first = 1; i < GS_SYNC_KINDS; i++) {
    if (!sync_names[i][0]) continue;
    fprintf(f, "%s\"%s\":[%llu,%llu]", first ? "" : ",", sync_names[i],
            (unsigned long long)all.syncs[i].calls, (unsigned long long)gs_ticks_to_ns(all.syncs[i].ticks));
    first = 0;
  }
  fprintf(f, "},\"copies\":{");
  for (i = 0, first = 1; i < GS_COPY_KINDS; i++) {
    gs_bytes_counter k = {0, 0};
    int sc, dc;
    for (sc = 0; sc < GS_MEM_CLASSES; sc++)
      for (dc = 0; dc < GS_MEM_CLASSES; dc++)
        k.calls += all.copies[i][sc][dc].calls, k.bytes += all.copies[i][sc][dc].bytes;
    if (!k.calls) continue;
    fprintf(f, "%s\"%d\":[%llu,%llu]", first ? "" : ",", i, (unsigned long long)k.calls,
            (unsigned long long)k.bytes);
    first = 0;
  }
  fputc('}', f);
  put_host_memory(f, &all);
  fprintf(f, ",\"memsets\":[%llu,%llu],\"captured\":%llu,\"graph_captures\":%llu,\"graphs_unnamed\":%llu,\"devices_over\":%llu",
          (unsigned long long)all.memsets.calls, (unsigned long long)all.memsets.bytes,
          (unsigned long long)gs_state.captured, (unsigned long long)gs_state.graph_captures,
          (unsigned long long)gs_state.graphs_unnamed, (unsigned long long)gs_state.devices_over);
  put_devices(f);
  fprintf(f, ",\"samples\":{\"taken\":%llu,\"skipped\":%llu,\"failed\":%llu}",
          (unsigned long long)gs_sampling.taken, (unsigned long long)gs_sampling.skipped,
          (unsigned long long)gs_sampling.failed);
  fprintf(f, ",\"bound_by_export\":%llu,\"bound_by_rule\":%llu,\"unbound\":%llu,\"slots_full\":%llu}\n",
          (unsigned long long)gs_stats.bound_by_export, (unsigned long long)gs_stats.bound_by_rule,
          (unsigned long long)gs_stats.unbound, (unsigned long long)gs_stats.slots_full);
  fclose(f);
  rename(tmp, path);
}

void gs_interpose_started(const char* report) {
  if (report && *report && strlen(report) < sizeof g_prefix) {
    snprintf(g_prefix, sizeof g_prefix, "%s", report);
    gs_hostmem_say(1);
    atexit(write_report);
  }
}
