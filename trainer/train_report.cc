#include "train_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace lens::train {

using json = nlohmann::json;

void write_report(const RankReport& r, const std::string& path) {
  json steps = json::array();
  for (const auto& s : r.steps) {
    steps.push_back({{"step", s.step},
                     {"loss", s.loss ? json(*s.loss) : json(nullptr)},
                     {"milliseconds", s.milliseconds},
                     {"open_microseconds", s.open_microseconds},
                     {"trace_id", s.trace_id}});
  }
  json j = {{"rank", r.rank},
            {"stage", r.stage},
            {"replica", r.replica},
            {"tensor", r.tensor},
            {"tracing", r.tracing},
            {"span_groups", r.span_groups},
            {"run_id", r.run_id},
            {"trace_file", r.trace_file},
            {"otlp_endpoint", r.otlp_endpoint},
            {"spans_produced", r.spans.ended},
            {"spans_exported", r.spans.exported},
            {"spans_spooled", r.spans.spooled},
            {"spool_path", r.spans.spool_path},
            {"spans_dropped", r.spans.dropped()},
            {"spans_dropped_queue_full", r.spans.dropped_queue_full},
            {"spans_dropped_shutdown", r.spans.dropped_shutdown},
            {"spans_dropped_export_error", r.spans.dropped_export_error},
            {"spans_dropped_forked_child", r.spans.dropped_forked_child},
            {"spans_dropped_hold_full", r.spans.dropped_hold_full},
            {"spans_not_selected", r.spans.not_selected},
            {"spans_truncated", r.spans.truncated},
            {"otlp_requests", r.otlp_requests},
            {"otlp_retries", r.otlp_retries},
            {"backend_unhealthy", r.backend_unhealthy},
            {"queue_high_water", r.queue_high_water},
            {"broadcasts", r.broadcasts},
            {"derived_steps", r.derived_steps},
            {"step_checks", r.step_checks},
            {"steps", steps}};
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << j.dump(1) << "\n";
  std::filesystem::rename(tmp, path);
}

RankReport read_report(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read rank report " + path);
  json j = json::parse(in);
  RankReport r;
  r.rank = j.at("rank");
  r.stage = j.at("stage");
  r.replica = j.at("replica");
  r.tensor = j.value("tensor", 0);
  r.tracing = j.at("tracing");
  r.span_groups = j.at("span_groups");
  r.run_id = j.at("run_id");
  r.trace_file = j.at("trace_file");
  r.otlp_endpoint = j.value("otlp_endpoint", "");
  const auto count = [&](const char* key) { return j.value(key, std::uint64_t{0}); };
  r.spans.ended = count("spans_produced");
  r.spans.exported = j.at("spans_exported");
  r.spans.spooled = count("spans_spooled");
  r.spans.spool_path = j.value("spool_path", "");
  r.spans.dropped_queue_full = count("spans_dropped_queue_full");
  r.spans.dropped_shutdown = count("spans_dropped_shutdown");
  r.spans.dropped_export_error = count("spans_dropped_export_error");
  r.spans.dropped_forked_child = count("spans_dropped_forked_child");
  r.spans.dropped_hold_full = count("spans_dropped_hold_full");
  r.spans.not_selected = count("spans_not_selected");
  r.spans.truncated = count("spans_truncated");
  r.otlp_requests = count("otlp_requests");
  r.otlp_retries = count("otlp_retries");
  r.backend_unhealthy = count("backend_unhealthy");
  r.queue_high_water = count("queue_high_water");
  r.broadcasts = j.at("broadcasts");
  r.derived_steps = j.value("derived_steps", std::uint64_t{0});
  r.step_checks = j.value("step_checks", std::uint64_t{0});
  for (const auto& s : j.at("steps")) {
    StepReport sr;
    sr.step = s.at("step");
    if (!s.at("loss").is_null()) sr.loss = s.at("loss").get<double>();
    sr.milliseconds = s.at("milliseconds");
    sr.open_microseconds = s.value("open_microseconds", 0.0);
    sr.trace_id = s.at("trace_id");
    r.steps.push_back(sr);
  }
  return r;
}

std::string summarize(const std::vector<RankReport>& ranks, int pp, int dp, int tp,
                      int microbatches) {
  std::ostringstream out;
  char line[512];
  const RankReport* last = nullptr;  // last stage of replica 0, TP rank 0, reports the loss
  const RankReport* first = nullptr;
  SpanAccount spans;  // every rank's, summed
  bool all_exported = true;
  for (const auto& r : ranks) {
    if (r.stage == pp - 1 && r.replica == 0 && r.tensor == 0) last = &r;
    if (r.rank == 0) first = &r;
    spans.add(r.spans);
    all_exported &= r.spans.exported == r.spans.ended;
  }
  // The ranks' spool files sit side by side: name them together.
  if (!spans.spool_path.empty())
    spans.spool_path =
        std::filesystem::path(spans.spool_path).parent_path().string() + "/spool-rank-*.otlp.jsonl";
  const std::size_t steps = first ? first->steps.size() : 0;
  std::snprintf(line, sizeof line,
                "lens-train: %zu steps, pp=%d dp=%d tp=%d microbatches=%d (%zu ranks)\n", steps, pp,
                dp, tp, microbatches, ranks.size());
  out << line;
  if (last && !last->steps.empty() && last->steps.front().loss && last->steps.back().loss) {
    std::snprintf(line, sizeof line, "  loss          %.4f -> %.4f (last stage, replica 0)\n",
                  *last->steps.front().loss, *last->steps.back().loss);
    out << line;
  }
  if (first && !first->steps.empty()) {
    std::vector<double> ms;
    for (const auto& s : first->steps) ms.push_back(s.milliseconds);
    std::sort(ms.begin(), ms.end());
    std::snprintf(line, sizeof line,
                  "  step time     %.1f ms median (rank 0; first step %.1f ms)\n",
                  ms[ms.size() / 2], first->steps.front().milliseconds);
    out << line;
  }
  if (first && first->tracing) {
    const std::string dir = std::filesystem::path(first->trace_file).parent_path().string();
    std::snprintf(line, sizeof line, "  tracing       on, span groups %s, run id %s\n",
                  first->span_groups.c_str(), first->run_id.c_str());
    out << line;
    out << "  spans         " << spans.describe() << "\n";
    // Per rank, when some span was not exported: where each rank's went.
    if (!all_exported)
      for (const auto& r : ranks) {
        std::snprintf(line, sizeof line, "    rank %-4d   ", r.rank);
        out << line << r.spans.describe() << "\n";
      }
    std::snprintf(line, sizeof line, "  broadcasts    %llu trace-context broadcasts per rank\n",
                  static_cast<unsigned long long>(first->broadcasts));
    out << line;
    if (first->derived_steps > 0) {
      std::snprintf(line, sizeof line,
                    "  step context  derived on every rank for %llu steps, %llu step checks "
                    "per rank\n",
                    static_cast<unsigned long long>(first->derived_steps),
                    static_cast<unsigned long long>(first->step_checks));
      out << line;
    }
    if (!first->otlp_endpoint.empty()) {
      out << "  traces        sent to " << first->otlp_endpoint << " (OTLP/HTTP)\n";
      if (spans.spooled > 0) {
        const std::string spool_dir =
            std::filesystem::path(spans.spool_path).parent_path().string();
        out << "  spool         what the backend did not take is in " << spool_dir
            << "\n                build/bin/lens upload " << spool_dir << " --endpoint "
            << first->otlp_endpoint << "  (once it answers)\n";
      }
    } else if (!first->trace_file.empty()) {
      out << "  traces        " << dir
          << "/rank-*.otlp.jsonl (OTLP JSON lines, one file per rank)\n";
      out << "  look at them  build/bin/lens check|summary|timeline " << dir << "\n"
          << "                build/bin/lens upload " << dir
          << " --endpoint http://localhost:4318/v1/traces  (Jaeger)\n";
    }
    out << "  in Jaeger     search service.name=megatron-lm, tag nemo.run.id=" << first->run_id
        << "\n";
  } else {
    out << "  tracing       off (pass --otel-enabled=true or set MEGATRON_OTEL_ENABLED=1)\n";
  }
  return out.str();
}

}  // namespace lens::train
