#include "graph_sampling.h"

#include <stdio.h>

#include <algorithm>

#include "log.h"

namespace graphsignal {
namespace cupti {

namespace {
using ms = std::chrono::milliseconds;
constexpr uint64_t kMinProbeLaunches = 4;
constexpr int kProbeMaxMs = 2000;     // a probe with a few launches ends here
constexpr int kVerdictMinMs = 200;    // the probe's launches have run and their records (if any) come in
constexpr int kVerdictMaxMs = 1500;   // ... by then at the latest
constexpr int kPollMs = 30;
constexpr int kFlushAfterWindowMs = 50;
constexpr int kStopCallbacksAfterMs = 50;

GraphLaunches::Evidence& operator+=(GraphLaunches::Evidence& a, const GraphLaunches::Evidence& b) {
  a.window_launches += b.window_launches, a.window_samples += b.window_samples;
  a.quiet_launches += b.quiet_launches, a.quiet_records += b.quiet_records, a.stray_nodes += b.stray_nodes;
  return a;
}

unsigned long long u(uint64_t v) { return static_cast<unsigned long long>(v); }
}  // namespace

GraphSampling::GraphSampling(GraphLaunches* launches, const GraphSamplingConfig& cfg, const Ops& ops)
    : launches_(launches), cfg_(cfg), ops_(ops) {}

GraphSampling::Clock::time_point GraphSampling::due() const {
  switch (phase_) {
    case kWaiting:
      return woken_ ? Clock::time_point::min() : Clock::time_point::max();
    case kQuiet:
      return std::min(next_, flush_at_);
    default:
      return next_;
  }
}

const char* GraphSampling::phase_name() const {
  static const char* const names[] = {"waiting for a graph launch", "probing", "waiting for the probe's records",
                                      "sampling (window)", "sampling", "every replay traced", "every replay traced"};
  return names[phase_];
}

void GraphSampling::start_probe(Clock::time_point now) {
  // Launches are counted from here on; the ones before the quiet state
  // begins are marked (a window: their records are samples, not evidence).
  launches_->open_window();
  if (!launches_->begin_accounting()) {
    launches_->close_window();
    log(Level::kInfo, "CUDA graph launch callbacks carry no correlation id here; every replay is traced");
    phase_ = kOff;
    next_ = Clock::time_point::max();
    ops_.stop_callbacks(ops_.ctx);
    return;
  }
  if (!ops_.set_exact(ops_.ctx, false)) {
    end(now, "CUPTI refused to switch GRAPH_TRACE");
    return;
  }
  launches_->close_window();
  launches_->take_evidence();  // the launches before the probe: not probe evidence
  phase_ = kProbe;
  started_ = now;
  next_ = now + ms(std::min(std::max(cfg_.window_ms, 20u), 200u));
}

void GraphSampling::start_sampling(Clock::time_point now, bool from_window) {
  // No fold here: the last launches of the open window have no records yet;
  // the first window's judgment folds them with their records.
  log(Level::kInfo, "CUDA graph replays are counted by launch callbacks and timed in sampling windows of %u ms "
      "every %u ms (GRAPH_TRACE %s between windows; durations tagged duration=sampled)", cfg_.window_ms,
      cfg_.period_ms, launches_->mode() == GraphLaunches::Mode::kGraph ? "off" : "on");
  if (from_window) {
    // the exact state, window open: close it into the quiet state
    if (!ops_.set_exact(ops_.ctx, false)) {
      end(now, "CUPTI refused to switch GRAPH_TRACE");
      return;
    }
    launches_->close_window();
  }
  phase_ = kQuiet;
  window_start_ = now;
  next_ = now + ms(cfg_.period_ms - cfg_.window_ms);
  flush_at_ = now + ms(kFlushAfterWindowMs);
  strikes_ = 0;
}

void GraphSampling::end(Clock::time_point now, const char* why) {
  // Back to the exact state for good: later launches count by their records.
  ops_.set_exact(ops_.ctx, true);
  launches_->close_window();
  launches_->end_accounting();
  log(Level::kInfo, "CUDA graph replays are traced in full from now on: %s", why);
  phase_ = kEnded;
  flush_at_ = Clock::time_point::max();
  // Launch callbacks in flight (microseconds) may still count ids up to
  // the boundary: switched off a little later.
  next_ = now + ms(kStopCallbacksAfterMs);
}

bool GraphSampling::strike(const GraphLaunches::Evidence& e) const {
  if (e.window_launches >= 8 && e.window_samples == 0) return true;
  uint64_t allowed = std::max<uint64_t>(8, e.quiet_launches / 20);
  if (e.quiet_records > allowed) return true;
  return launches_->mode() == GraphLaunches::Mode::kGraph && e.stray_nodes > allowed;
}

bool GraphSampling::run(Clock::time_point now) {
  if (phase_ != kEnded && phase_ != kOff && launches_->accounting()) {
    if (const char* why = launches_->full_trace_reason()) {
      end(now, why);
      return true;
    }
  }
  switch (phase_) {
    case kWaiting:
      if (!woken_) return false;
      woken_ = false;
      if (cfg_.probe) {
        start_probe(now);
        return phase_ != kProbe;
      }
      // trusted: accounting from now, the first window open right away
      launches_->open_window();
      if (!launches_->begin_accounting()) {
        launches_->close_window();
        log(Level::kInfo, "CUDA graph launch callbacks carry no correlation id here; every replay is traced");
        phase_ = kOff;
        ops_.stop_callbacks(ops_.ctx);
        return false;
      }
      launches_->take_evidence();
      log(Level::kInfo, "CUDA graph replays are counted by launch callbacks and timed in sampling windows of %u ms "
          "every %u ms (not probed first)", cfg_.window_ms, cfg_.period_ms);
      phase_ = kWindow;
      window_start_ = now;
      next_ = now + ms(cfg_.window_ms);
      return false;

    case kProbe: {
      if (now < next_) return false;
      probe_ += launches_->take_evidence();
      bool few = probe_.quiet_launches < kMinProbeLaunches;
      if (few && (probe_.quiet_launches == 0 || now - started_ < ms(kProbeMaxMs))) {
        next_ = now + ms(std::min(std::max(cfg_.window_ms, 20u), 200u));  // idle: no cost, keep waiting
        return false;
      }
      // The exact state again, as a window: its records show that records
      // of the probe's launches would have arrived by now.
      launches_->open_window();
      if (!ops_.set_exact(ops_.ctx, true)) {
        end(now, "CUPTI refused to switch GRAPH_TRACE back");
        return true;
      }
      phase_ = kVerdict;
      started_ = now;
      next_ = now + ms(kPollMs);
      return false;
    }

    case kVerdict: {
      if (now < next_) return false;
      ops_.flush(ops_.ctx);
      verdict_ += launches_->take_evidence();
      if ((!verdict_.window_samples || now - started_ < ms(kVerdictMinMs)) && now - started_ < ms(kVerdictMaxMs)) {
        next_ = now + ms(kPollMs);
        return false;
      }
      uint64_t n = probe_.quiet_launches;
      uint64_t quiet = probe_.quiet_records + verdict_.quiet_records, stray = probe_.stray_nodes + verdict_.stray_nodes;
      uint64_t allowed = std::max<uint64_t>(2, n / 20);
      log(Level::kDebug, "CUDA graph probe: %llu quiet launches gave %llu records and %llu node records; %llu launches "
          "after it gave %llu samples", u(n), u(quiet), u(stray), u(verdict_.window_launches),
          u(verdict_.window_samples));
      char why[256];
      if (quiet > allowed) {
        snprintf(why, sizeof why, "with GRAPH_TRACE switched %s, CUPTI still recorded %llu of %llu graph launches",
                 launches_->mode() == GraphLaunches::Mode::kGraph ? "off" : "on", u(quiet), u(n));
        end(now, why);
        return true;
      }
      if (launches_->mode() == GraphLaunches::Mode::kGraph && stray > allowed) {
        snprintf(why, sizeof why, "with GRAPH_TRACE off and kernel tracing on, CUPTI traced the nodes of %llu graph "
                 "launches (%llu node records): the quiet state would cost more than tracing replays", u(n), u(stray));
        end(now, why);
        return true;
      }
      if (verdict_.window_launches >= 8 && !verdict_.window_samples) {
        snprintf(why, sizeof why, "with GRAPH_TRACE switched back, %llu graph launches gave no records",
                 u(verdict_.window_launches));
        end(now, why);
        return true;
      }
      start_sampling(now, true);
      return false;
    }

    case kWindow:
      if (now < next_) return false;
      if (!ops_.set_exact(ops_.ctx, false)) {
        end(now, "CUPTI refused to switch GRAPH_TRACE");
        return true;
      }
      launches_->close_window();
      phase_ = kQuiet;
      flush_at_ = now + ms(kFlushAfterWindowMs);
      next_ = window_start_ + ms(cfg_.period_ms);
      return false;

    case kQuiet: {
      if (now >= flush_at_) {
        ops_.flush(ops_.ctx);  // the window's records, translated before it is judged
        flush_at_ = Clock::time_point::max();
      }
      if (now < next_) return false;
      GraphLaunches::Evidence e = launches_->take_evidence();
      launches_->fold();
      strikes_ = strike(e) ? strikes_ + 1 : 0;
      if (strikes_ >= 2) {
        char why[256];
        snprintf(why, sizeof why, "a window's %llu launches gave %llu samples, and %llu quiet launches gave %llu "
                 "records (%llu node records)", u(e.window_launches), u(e.window_samples), u(e.quiet_launches),
                 u(e.quiet_records), u(e.stray_nodes));
        end(now, why);
        return true;
      }
      launches_->open_window();
      if (!ops_.set_exact(ops_.ctx, true)) {
        end(now, "CUPTI refused to switch GRAPH_TRACE");
        return true;
      }
      phase_ = kWindow;
      window_start_ = now;
      next_ = now + ms(cfg_.window_ms);
      return false;
    }

    case kEnded:
      if (now < next_) return false;
      ops_.stop_callbacks(ops_.ctx);
      phase_ = kOff;
      next_ = Clock::time_point::max();
      return false;

    case kOff:
      return false;
  }
  return false;
}

}  // namespace cupti
}  // namespace graphsignal
