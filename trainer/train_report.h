// What each rank reports at the end of a run, and the launcher's summary of
// all ranks' reports.
//
// Thread safety: plain functions; call from one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lens/telemetry.h"

namespace lens::train {

struct StepReport {
  std::int64_t step = 0;
  std::optional<double> loss;  // on the last stage
  double milliseconds = 0;
  // How long the step's opening took on the training thread: the step
  // protocol (the context's broadcast or derivation, any step check or
  // clock sample due) and the step span's start.
  double open_microseconds = 0;
  std::string trace_id;  // of the step's broadcast context; empty without one
};

struct RankReport {
  int rank = 0;
  int stage = 0;
  int replica = 0;
  int tensor = 0;  // tensor-parallel rank
  bool tracing = false;
  std::string span_groups;
  std::string run_id;
  std::string trace_file;     // when spans go to files
  std::string otlp_endpoint;  // when spans go to an OTLP/HTTP endpoint
  // Where every span this rank ended went (telemetry.h): exported, spooled,
  // dropped by reason, truncated.
  SpanAccount spans;
  // OTLP/HTTP export only: requests made (retries included), retries, and
  // how often the backend was found not answering.
  std::uint64_t otlp_requests = 0;
  std::uint64_t otlp_retries = 0;
  std::uint64_t backend_unhealthy = 0;
  std::uint64_t queue_high_water = 0;  // most spans waiting for export at once
  std::uint64_t broadcasts = 0;        // trace-context broadcasts
  std::uint64_t derived_steps = 0;     // step contexts derived without a collective
  std::uint64_t step_checks = 0;       // step check all-gathers (derived mode)
  std::vector<StepReport> steps;
};

void write_report(const RankReport& report, const std::string& path);
RankReport read_report(const std::string& path);

// The human summary the launcher prints.
std::string summarize(const std::vector<RankReport>& ranks, int pp, int dp, int tp,
                      int microbatches);

}  // namespace lens::train
