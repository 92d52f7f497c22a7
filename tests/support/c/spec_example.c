/* SPEC.md's host probe examples, verbatim, plus a main that calls them. */
#include <graphsignal/probe.h>

static graphsignal_probe_entry* g_batch_ns;
void init() {
  g_batch_ns = graphsignal_probe_register(
      "myengine_batch_duration_nanoseconds", GRAPHSIGNAL_HISTOGRAM, NULL, NULL, 0);
}
void step() {
  uint64_t t0 = graphsignal_now_ns();
  // ... work ...
  graphsignal_record(g_batch_ns, graphsignal_now_ns() - t0);
}

static graphsignal_probe_entry* g_ops;
void init_ops() {
  g_ops = graphsignal_probe_register(
      "myengine_ops_nanoseconds", GRAPHSIGNAL_PROFILE, NULL, NULL, 0);
}
void run_op(const char* op_name) {
  uint64_t t0 = graphsignal_now_ns();
  // ... op ...
  graphsignal_profile_add_by_name(g_ops, op_name, graphsignal_now_ns() - t0);
}

int main(void) {
  int i;
  init();
  init_ops();
  for (i = 0; i < 1000; i++) {
    step();
    run_op(i % 2 ? "attention" : "mlp");
  }
  return 0;
}
