#include "trace_files.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "run_reader.h"

namespace lens::testing {

std::int64_t ExportedSpan::int_attr(const std::string& key) const {
  auto it = attributes.find(key);
  return it == attributes.end() ? -1 : std::stoll(it->second);
}

std::vector<ExportedSpan> read_run(const std::filesystem::path& dir) {
  // The `lens` command's reader does the parsing and the input checks.
  const lens::analysis::Run run = lens::analysis::read_run(dir);
  std::vector<ExportedSpan> out;
  for (const auto& f : run.files) {
    const std::map<std::string, std::string> resource = {{"dl.rank", std::to_string(f.rank)},
                                                         {"service.name", f.service_name},
                                                         {"nemo.run.id", f.run_id}};
    for (const auto& s : f.spans) {
      ExportedSpan e;
      e.file = f.path.string();
      e.trace_id = s.trace_id;
      e.span_id = s.span_id;
      e.parent_span_id = s.parent_span_id;
      e.name = s.name;
      e.start_ns = s.start_ns;
      e.end_ns = s.end_ns;
      for (const lens::analysis::Attributes::Entry a : s.attributes)
        e.attributes.emplace(a.key, a.text);
      e.resource = resource;
      for (const auto& [trace, span] : s.links) e.links.emplace_back(trace.str(), span.str());
      out.push_back(std::move(e));
    }
  }
  return out;
}

std::vector<std::string> check_correlation(const std::vector<ExportedSpan>& spans,
                                           const CorrelationExpectation& expect) {
  std::vector<std::string> problems;
  auto complain = [&](const std::string& p) {
    if (problems.size() < 50) problems.push_back(p);
  };
  // (step, rank) -> step span
  std::map<std::pair<std::int64_t, std::int64_t>, const ExportedSpan*> step_spans;
  std::map<std::string, const ExportedSpan*> by_id;
  for (const auto& s : spans) by_id[s.span_id] = &s;
  // A descendant of `ancestor` in its file (a linked span may sit in
  // forward_backward, inside the step span).
  const auto within = [&](const ExportedSpan& s, const ExportedSpan& ancestor) {
    const ExportedSpan* at = &s;
    for (int depth = 0; depth < 64 && !at->parent_span_id.empty(); ++depth) {
      if (at->parent_span_id == ancestor.span_id) return true;
      const auto it = by_id.find(at->parent_span_id);
      if (it == by_id.end() || it->second->file != s.file) return false;
      at = it->second;
    }
    return false;
  };
  for (const auto& s : spans) {
    if (s.name != "megatron.train_step") continue;
    auto key = std::make_pair(s.int_attr("dl.step"), s.int_attr("dl.rank"));
    if (step_spans.count(key))
      complain("two step spans for step " + std::to_string(key.first) + " on rank " +
               std::to_string(key.second));
    step_spans[key] = &s;
  }
  for (int step = 0; step < expect.steps; ++step) {
    const ExportedSpan* root = step_spans.count({step, 0}) ? step_spans[{step, 0}] : nullptr;
    if (!root) {
      complain("step " + std::to_string(step) + ": rank 0 has no megatron.train_step span");
      continue;
    }
    for (int rank = 0; rank < expect.ranks; ++rank) {
      auto it = step_spans.find({step, rank});
      const std::string where = "step " + std::to_string(step) + " rank " + std::to_string(rank);
      if (it == step_spans.end()) {
        complain(where + ": no megatron.train_step span");
        continue;
      }
      const ExportedSpan& mine = *it->second;
      if (mine.trace_id != root->trace_id)
        complain(where + ": trace id " + mine.trace_id + " differs from rank 0's " +
                 root->trace_id);
      if (!mine.parent_span_id.empty()) complain(where + ": step span has a parent");
      const int stage = static_cast<int>(mine.int_attr("dl.pipeline_parallel.rank"));
      int linked = 0;
      for (const auto& s : spans) {
        if (s.name != "megatron.pp.recv_forward.linked" || !within(s, mine)) continue;
        ++linked;
        if (s.trace_id != root->trace_id) complain(where + ": linked span in another trace");
        if (s.links.size() != 1) {
          complain(where + ": linked span has " + std::to_string(s.links.size()) + " links");
          continue;
        }
        if (s.links[0].first != root->trace_id || s.links[0].second != root->span_id)
          complain(where + ": link does not point at rank 0's step span");
        if (s.int_attr("dl.pipeline_parallel.rank") != stage)
          complain(where + ": linked span has the wrong dl.pipeline_parallel.rank");
        if (s.int_attr("dl.microbatch_id") < 0)
          complain(where + ": linked span has no dl.microbatch_id");
      }
      const int expected = expect.linked_per_step(stage);
      if (linked != expected)
        complain(where + " (stage " + std::to_string(stage) + "): " + std::to_string(linked) +
                 " linked spans, expected " + std::to_string(expected));
    }
  }
  // Every link anywhere must resolve to a span of the run.
  for (const auto& s : spans)
    for (const auto& l : s.links)
      if (!by_id.count(l.second)) complain(s.name + " on " + s.file + ": link to a missing span");
  return problems;
}

InjectedClocks test_clock_skew() { return {{0, -4000, 6500, -2500}, {0, 40, -30, 20}}; }

std::vector<std::string> check_clock_samples(const std::vector<ExportedSpan>& spans,
                                             const InjectedClocks& injected, int ranks) {
  std::vector<std::string> problems;
  std::map<int, std::vector<const ExportedSpan*>> by_rank;
  for (const auto& s : spans)
    if (s.name == "lens.clock_sync") by_rank[static_cast<int>(s.int_attr("dl.rank"))].push_back(&s);
  for (int rank = 0; rank < ranks; ++rank) {
    const auto& samples = by_rank[rank];
    if (samples.empty()) {
      problems.push_back("rank " + std::to_string(rank) + " has no lens.clock_sync span");
      continue;
    }
    const auto r = static_cast<std::size_t>(rank);
    const std::int64_t first = samples.front()->int_attr("lens.clock.local_time_ns");
    for (const auto* s : samples) {
      const double since_s =
          static_cast<double>(s->int_attr("lens.clock.local_time_ns") - first) / 1e9;
      const double truth_ns = (injected.offset_us[0] - injected.offset_us[r]) * 1e3 +
                              (injected.drift_ppm[0] - injected.drift_ppm[r]) * 1e3 * since_s;
      const double measured = static_cast<double>(s->int_attr("lens.clock.offset_ns"));
      const double bound =
          std::max(50'000.0, static_cast<double>(s->int_attr("lens.clock.uncertainty_ns")));
      if (std::abs(measured - truth_ns) > bound)
        problems.push_back("rank " + std::to_string(rank) + ": clock offset " +
                           std::to_string(measured) + " ns, injected " + std::to_string(truth_ns) +
                           " ns, bound " + std::to_string(bound) + " ns");
    }
  }
  return problems;
}

}  // namespace lens::testing
