// When CUDA graph replays are timed by sampling windows instead of CUPTI
// tracing every replay, and the run-time check that decides whether they
// can be (the hybrid collection; graph_launches.h counts and estimates).
//
// Two CUPTI states per trace mode, switched with cuptiActivityEnable/
// Disable(GRAPH_TRACE) while kernel tracing stays on (eager kernels stay
// exact):
//
//              exact state (times every replay)      quiet state (between windows)
//   graph mode GRAPH_TRACE on: a record per replay   GRAPH_TRACE off
//   node mode  GRAPH_TRACE off: a record per node    GRAPH_TRACE on: no per-node records
//
// Sampling pays only if the quiet state really is quiet: if CUPTI, with
// GRAPH_TRACE off and kernel tracing on, traces every node of a graph
// (graph mode), or keeps tracing graphs instantiated before the switch,
// the quiet state costs as much as the exact one or more. CUPTI's
// documentation does not say (scripts/bench_graph_toggle.py measures it),
// so it is decided here, per process, from what CUPTI does:
//
//   1. Until the first graph launch: the exact state, records counted as
//      the activity collection counts them.
//   2. Probe: launches are counted by callbacks from now on (accounting,
//      graph_launches.h); the quiet state for a short while (the window
//      length, 20-200 ms, until 4 launches); then the exact state again,
//      as an open window, until records of launches after the probe come
//      in (or 1.5 s).
//   3. Verdict: records of counted launches made in the quiet probe (graph
//      mode: node kernel records too) mean the switch does not take: every
//      replay is traced again for good (accounting ends, the launch
//      callbacks are switched off right after). Otherwise: sampling.
//   4. Sampling: the quiet state, and a window (the exact state) of
//      window_ms every period_ms. At each window's start the previous one
//      is judged: a window whose launches gave no record, or quiet
//      launches that gave records, is a strike; two in a row end sampling
//      as in 3 (CUPTI or the workload changed behind the probe's back).
//
// Replays counted since the probe started are estimated (tagged
// duration: sampled by the sidecar) whatever the verdict; before it, and
// after an end, records count as in the activity collection.
//
// Runs on the collector's thread only (due()/run() from its loop).
#pragma once

#include <chrono>

#include "graph_launches.h"

namespace graphsignal {
namespace cupti {

struct GraphSamplingConfig {
  unsigned window_ms = 0;     // GRAPHSIGNAL_CUPTI_GRAPH_SAMPLE_MS (0: off; see collector.h)
  unsigned period_ms = 1000;  // GRAPHSIGNAL_CUPTI_GRAPH_SAMPLE_PERIOD_MS
  bool probe = true;          // GRAPHSIGNAL_CUPTI_GRAPH_PROBE=0: trust the switch, no probe
};

class GraphSampling {
 public:
  using Clock = std::chrono::steady_clock;

  // What the collector does for it (CUPTI calls stay in collector.cpp).
  struct Ops {
    bool (*set_exact)(void* ctx, bool exact);  // false: CUPTI refused the switch
    void (*flush)(void* ctx);                  // cuptiActivityFlushAll(0)
    void (*stop_callbacks)(void* ctx);         // the launch callbacks off, for good
    void* ctx;
  };

  GraphSampling(GraphLaunches* launches, const GraphSamplingConfig& cfg, const Ops& ops);

  // The first graph launch was seen (graph_launches.h's hook woke the thread).
  void wake() { woken_ = true; }
  // When run() wants to be called next.
  Clock::time_point due() const;
  // Does what is due at `now`; true when it changed what is counted (the
  // collector flushes the estimates then).
  bool run(Clock::time_point now);

  bool sampling() const { return phase_ == kQuiet || phase_ == kWindow; }
  const char* phase_name() const;

 private:
  enum Phase { kWaiting, kProbe, kVerdict, kWindow, kQuiet, kEnded, kOff };

  void start_probe(Clock::time_point now);
  void start_sampling(Clock::time_point now, bool from_window);
  void end(Clock::time_point now, const char* why);
  bool strike(const GraphLaunches::Evidence& e) const;

  GraphLaunches* launches_;
  GraphSamplingConfig cfg_;
  Ops ops_;
  Phase phase_ = kWaiting;
  bool woken_ = false;
  Clock::time_point next_ = Clock::time_point::max();  // the phase's next step
  Clock::time_point flush_at_ = Clock::time_point::max();
  Clock::time_point started_{}, window_start_{};
  GraphLaunches::Evidence probe_{}, verdict_{};  // summed over the probe and the wait for its records
  int strikes_ = 0;
};

}  // namespace cupti
}  // namespace graphsignal
