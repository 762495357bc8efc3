// A run's spans as columns, one row per span, for a DataFrame
// (lens.analysis.read_run in the Python package): who recorded it (rank,
// replica, tensor rank, stage), where in the schedule (step, microbatch,
// model chunk), what (name, kind), when (start and end on rank 0's clock
// unless raw, as `lens analyze` puts them) and its ids. Read with the
// step stream (step_stream.h) and the clock alignment of every view; the
// table itself holds every span of the run.
//
// Thread safety: plain functions and values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "opened_run.h"

namespace lens::analysis {

struct SpanTable {
  // -1 where a span has none: stage (a span outside every step), step,
  // microbatch, chunk.
  std::vector<int> rank, replica, tensor, stage;
  std::vector<std::int64_t> step, microbatch, chunk;
  std::vector<std::string> name, kind;  // kind: pipeline_view.h's kind_name
  std::vector<std::int64_t> start_ns, end_ns;
  std::vector<std::uint8_t> aligned;  // on the reference clock (its process had samples)
  std::vector<std::string> trace_id, span_id, parent_span_id;
  std::vector<int> links, status_code;

  std::size_t size() const { return name.size(); }
};

// ReadError for a bad run, as every view.
SpanTable read_span_table(const OpenedRun& run, bool raw_clock,
                          std::vector<std::string>* warnings);

}  // namespace lens::analysis
