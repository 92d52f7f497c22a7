/* What interpose.c shares with the rest of the interposer: its own
 * bookkeeping, the rows' call counts (for the report) and the wrappers of
 * cuGetProcAddress. */
#ifndef GRAPHSIGNAL_INTERPOSE_INTERPOSE_H
#define GRAPHSIGNAL_INTERPOSE_INTERPOSE_H

#include <stdint.h>

#include "cuda_abi.h"

typedef struct {
  uint64_t bound_by_export; /* cuGetProcAddress answers that were libcuda's export of a row */
  uint64_t bound_by_rule;   /* answers of another address, bound by base name and stream flavour */
  uint64_t unbound;         /* answers of a counted name handed out uncounted (signature not told apart) */
  uint64_t slots_full;      /* answers of a row whose wrappers were all bound to other addresses */
} gs_interpose_stats;

extern gs_interpose_stats gs_stats;

gs_CUresult gs_cuGetProcAddress_v2(const char* symbol, void** pfn, int version, uint64_t flags, int* status);
gs_CUresult gs_cuGetProcAddress(const char* symbol, void** pfn, int version, uint64_t flags);

int gs_interpose_rows(void);
const char* gs_interpose_row_name(int row);
uint64_t gs_interpose_row_calls(int row);
int gs_interpose_row_bound(int row);

/* report.c: called once, when the process first reaches the driver
 * (`report`: GRAPHSIGNAL_INTERPOSE_REPORT, or NULL), and for each cuGetProcAddress
 * answer of a counted name while the report is on (how: 0 the export, 1
 * handed out uncounted, 2 bound by rule). */
void gs_interpose_started(const char* report);
void gs_interpose_note_lookup(const char* symbol, int version, uint64_t flags, const char* row, int how);

#endif
