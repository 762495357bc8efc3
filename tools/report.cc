#include "report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "analyze.h"
#include "pipeline_view.h"
#include "lens_assets.h"
#include "timeline.h"

namespace lens::tools {

using namespace lens::analysis;  // the readers this command is a front of
using nlohmann::json;

std::filesystem::path chart_js_path() {
  if (const char* env = std::getenv("LENS_CHART_JS"); env != nullptr && *env != '\0') return env;
  return "/usr/share/javascript/chart.js/chart.min.js";
}

namespace {

std::string read_chart_js(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in || text.str().empty())
    throw std::runtime_error(
        fmt::format("cannot read Chart.js from {} (Debian: apt-get install libjs-chart.js; or set "
                    "LENS_CHART_JS to chart.umd.js or chart.min.js)",
                    path.string()));
  std::string js = text.str();
  // Inside <script>, "</script" would end the element early.
  for (std::size_t at = js.find("</script"); at != std::string::npos; at = js.find("</script", at))
    js.replace(at, 2, "<\\/");
  return js;
}

// A series over steps, at most one point per `bucket` steps: each bucket's
// first step, the mean of its values and their maximum.
struct Series {
  json x = json::array(), mean = json::array(), max = json::array();
};

Series bucketed(const std::vector<std::pair<std::int64_t, double>>& points, std::size_t bucket) {
  Series s;
  for (std::size_t i = 0; i < points.size(); i += bucket) {
    const std::size_t end = std::min(points.size(), i + bucket);
    double sum = 0, most = points[i].second;
    for (std::size_t k = i; k < end; ++k) {
      sum += points[k].second;
      most = std::max(most, points[k].second);
    }
    s.x.push_back(points[i].first);
    s.mean.push_back(sum / static_cast<double>(end - i));
    s.max.push_back(most);
  }
  return s;
}

std::string place_of(const Analysis& a, int stage, int replica, int tensor, int rank) {
  std::string place = fmt::format("stage {} (rank {}", stage, rank);
  if (a.replicas > 1) place += fmt::format(", replica {}", replica);
  if (a.tensors > 1) place += fmt::format(", tensor rank {}", tensor);
  return place + ")";
}

// The spans of two steps, read again (the stream stops after the later).
struct DrawnStep {
  std::int64_t step = -1;
  Run run;
};

std::vector<DrawnStep> read_steps(const OpenedRun& run, std::vector<std::int64_t> steps,
                                  const ClockAlignment& clock) {
  ClockReport clock_report = ClockReport::of(clock);
  LateSpans late;
  StreamOptions so = aligned_stream(clock, &clock_report, &late);
  so.stop_after_step = *std::max_element(steps.begin(), steps.end());
  std::vector<DrawnStep> out;
  stream_steps(
      run,
      [&](StepWindow& w) {
        if (std::find(steps.begin(), steps.end(), w.step) != steps.end())
          out.push_back({w.step, std::move(w.run)});
      },
      so);
  return out;
}

std::string wave_section(const std::string& id, const std::string& heading,
                         const DrawnStep& drawn) {
  const PipelineView view = build_view(drawn.run);
  TimelineOptions o;
  o.first_step = o.last_step = drawn.step;
  o.pipeline_of = pipelines_of(drawn.run);
  const Wave wave = render_wave(view, o, id);
  return fmt::format("<section><h3>{}</h3>\n{}<div class=\"wave-box\">{}</div></section>\n",
                     html_escape(heading), wave_legend(wave), wave.svg);
}

// The step chart: each bucket's mean and max step time, and a marker
// where each verdict begins.
void add_step_chart(const Analysis& a, std::size_t bucket, json& data) {
  data["bucket"] = bucket;
  data["p50_ms"] = a.step_p50_ms;
  data["p95_ms"] = a.step_p95_ms;
  std::vector<std::pair<std::int64_t, double>> step_ms;
  for (const auto& r : a.step_rows) step_ms.push_back({r.step, r.step_ms});
  const Series steps = bucketed(step_ms, bucket);
  data["step"] = {{"x", steps.x}, {"mean", steps.mean}, {"max", steps.max}};
  const auto step_time = [&](std::int64_t step) {
    for (const auto& r : a.step_rows)
      if (r.step >= step) return r.step_ms;
    return a.step_p95_ms;
  };
  json markers = json::array();
  for (const auto& s : a.stragglers)
    markers.push_back(
        {{"step", s.who.since_step},
         {"ms", step_time(s.who.since_step)},
         {"rank", s.who.rank},
         {"label", fmt::format("straggler: rank {} (stage {}) {:.2f}x since step {}", s.who.rank,
                               s.who.stage, s.who.ratio, s.who.since_step)}});
  const std::int64_t first_step = a.step_rows.empty() ? 0 : a.step_rows.front().step;
  for (const auto& r : a.imbalance)
    markers.push_back({{"step", first_step},
                       {"ms", step_time(first_step)},
                       {"stage", r.what.stage},
                       {"label", fmt::format("imbalance: stage {} {:.2f}x from the first steps",
                                             r.what.stage, r.what.ratio)}});
  data["markers"] = markers;
}

// Each stage's columns per step: compute, waits (for a neighbour, at the
// TP collectives and at the gradient sync), transfer, the rest.
json stage_charts(const Analysis& a, std::size_t bucket) {
  std::map<std::tuple<int, int, int>, std::vector<const StageStepFigures*>> rows;
  for (const auto& r : a.stage_steps) rows[{r.replica, r.tensor, r.stage}].push_back(&r);
  json stages = json::array();
  for (const auto& st : a.stages_analysis) {
    const auto it = rows.find({st.replica, st.tensor, st.stage});
    if (it == rows.end()) continue;
    std::vector<std::pair<std::int64_t, double>> compute, waits, transfer, rest;
    for (const StageStepFigures* r : it->second) {
      compute.push_back({r->step, r->compute_ms});
      waits.push_back({r->step, r->late_sender_ms + r->late_receiver_ms + r->collective_wait_ms +
                                    r->sync_wait_ms});
      transfer.push_back({r->step, r->transfer_ms});
      rest.push_back({r->step, r->rest_ms});
    }
    const Series c = bucketed(compute, bucket);
    stages.push_back({{"label", place_of(a, st.stage, st.replica, st.tensor, st.rank)},
                      {"stage", st.stage},
                      {"rank", st.rank},
                      {"replica", st.replica},
                      {"tensor", st.tensor},
                      {"critical_share_p50", st.critical_share_p50},
                      {"critical_share_p95", st.critical_share_p95},
                      {"x", c.x},
                      {"compute", c.mean},
                      {"waits", bucketed(waits, bucket).mean},
                      {"transfer", bucketed(transfer, bucket).mean},
                      {"rest", bucketed(rest, bucket).mean}});
  }
  return stages;
}

// The bubble measured per step against the schedule's.
json bubble_chart(const Analysis& a, std::size_t bucket) {
  std::vector<std::pair<std::int64_t, double>> bubble;
  for (const auto& r : a.step_rows)
    if (r.bubble >= 0) bubble.push_back({r.step, r.bubble});
  const Series b = bucketed(bubble, bucket);
  return {{"x", b.x},
          {"measured", b.mean},
          {"p50", a.bubble_p50 >= 0 ? json(a.bubble_p50) : json(nullptr)},
          {"theoretical", a.theoretical_bubble >= 0 ? json(a.theoretical_bubble) : json(nullptr)},
          {"formula", theoretical_bubble_formula(a.virtual_stages)}};
}

// Each process's clock samples, against the time since the run's first
// sample (on the reference clock), thinned to max_points each.
json clock_chart(const ClockAlignment& alignment, std::size_t max_points) {
  json clock = json::array();
  const auto series = alignment.series();
  std::int64_t origin = 0;
  bool have_origin = false;
  for (const auto& s : series)
    for (const auto& p : s.points)
      if (!have_origin || p.local_ns + p.offset_ns < origin) {
        origin = p.local_ns + p.offset_ns;
        have_origin = true;
      }
  for (const auto& s : series) {
    const std::size_t stride =
        std::max<std::size_t>(1, (s.points.size() + max_points - 1) / max_points);
    json t = json::array(), offset = json::array(), uncertainty = json::array();
    for (std::size_t i = 0; i < s.points.size(); i += stride) {
      const ClockPoint& p = s.points[i];
      t.push_back(static_cast<double>(p.local_ns + p.offset_ns - origin) / 1e9);
      offset.push_back(static_cast<double>(p.offset_ns) / 1e3);
      uncertainty.push_back(static_cast<double>(p.uncertainty_ns) / 1e3);
    }
    clock.push_back({{"rank", s.rank},
                     {"model", clock_model_name(s.model)},
                     {"t_s", t},
                     {"offset_us", offset},
                     {"uncertainty_us", uncertainty}});
  }
  return clock;
}

// The waves: the median step (the lower middle by step time) and the
// slowest, read again from the run; their steps go into the report.
std::string wave_sections(const OpenedRun& run, const Analysis& a,
                          const ClockAlignment& alignment, Report& report) {
  std::string waves;
  if (a.step_rows.empty()) return waves;
  std::vector<const StepRow*> by_time;
  for (const auto& r : a.step_rows) by_time.push_back(&r);
  std::sort(by_time.begin(), by_time.end(), [](const StepRow* x, const StepRow* y) {
    return std::tie(x->step_ms, x->step) < std::tie(y->step_ms, y->step);
  });
  const StepRow& median = *by_time[(by_time.size() - 1) / 2];
  const StepRow& slowest = *by_time.back();
  report.median_step = median.step;
  report.slowest_step = slowest.step;
  const std::vector<DrawnStep> drawn = read_steps(run, {median.step, slowest.step}, alignment);
  for (const auto& d : drawn) {
    if (d.step == median.step)
      waves += wave_section("wave-median",
                            fmt::format("The median step: step {} ({:.2f} ms), critical path "
                                        "outlined",
                                        median.step, median.step_ms),
                            d);
    if (d.step == slowest.step && slowest.step != median.step)
      waves += wave_section(
          "wave-slowest",
          fmt::format("The slowest step: step {} ({:.2f} ms)", slowest.step, slowest.step_ms), d);
  }
  return waves;
}

// The line of facts under the title.
std::string facts_of(const Analysis& a, std::size_t bucket) {
  if (a.steps == 0)
    return "No step to analyse: record the step, forward_backward and microbatch span groups "
           "(e.g. per_step,microbatch).";
  std::string facts = fmt::format(
      "{} steps; {} stages{}{}{}, {} microbatches per step. Step p50 {:.2f} ms, p95 {:.2f} ms; "
      "critical path p50 {:.2f} ms.",
      a.steps, a.stages,
      a.virtual_stages > 1 ? fmt::format(" of {} chunks", a.virtual_stages) : std::string(),
      a.replicas > 1 ? fmt::format(" x {} replicas", a.replicas) : std::string(),
      a.tensors > 1 ? fmt::format(" x {} tensor ranks", a.tensors) : std::string(),
      a.microbatches, a.step_p50_ms, a.step_p95_ms, a.critical_path_p50_ms);
  if (bucket > 1) facts += fmt::format(" Charts over steps show the mean of every {} steps.", bucket);
  return facts;
}

// The page: its own style and error capture first, Chart.js, then the
// body; the charts drawn from the data element.
std::string page(const std::string& title, const Analysis& a, const std::string& chart_js,
                 std::size_t bucket, std::size_t stage_count, const std::string& waves,
                 const json& data) {
  const std::string facts = facts_of(a, bucket);
  const std::string verdicts = a.steps > 0 ? format_verdicts(a) : std::string();
  std::string stage_charts;
  for (std::size_t i = 0; i < stage_count; ++i)
    stage_charts +=
        fmt::format("<div class=\"chart small\"><canvas id=\"chart-stage-{}\"></canvas></div>", i);
  std::string data_text = data.dump();
  for (std::size_t at = data_text.find("</"); at != std::string::npos;
       at = data_text.find("</", at))
    data_text.replace(at, 2, "<\\/");

  std::string html = "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>" +
                     html_escape(title) + "</title>\n";
  html += "<style>\n" + std::string(assets::kReportCss) + "\n" + wave_style() + "</style>\n";
  html += "<script>\n" + std::string(assets::kReportErrorsJs) + "</script>\n";
  html += "<script>\n" + chart_js + "\n</script>\n";
  html += "</head><body>\n<h2>" + html_escape(title) + "</h2>\n<p class=\"facts\">" +
          html_escape(facts) + "<br>" + html_escape(a.clock.describe()) +
          "</p>\n<pre class=\"verdict\">" + html_escape(verdicts) + "</pre>\n";
  html += R"(<section><h3>Step time</h3><div class="chart"><canvas id="chart-step"></canvas></div>
<p class="note">Triangles: where a straggler began, or a stage that does more work from the first steps (imbalance).</p></section>
<section><h3>Each stage's step: compute, waits, transfer and the rest</h3>
<p class="note">Per step these add up to the stage's step span exactly (waits: for a neighbour's send or receive, at the tensor-parallel collectives and at the gradient sync).</p>
)" + stage_charts +
          R"(</section>
<section><h3>Share of the critical path per stage</h3><div class="chart"><canvas id="chart-critical"></canvas></div></section>
<section><h3>Bubble: measured against the schedule's</h3><div class="chart"><canvas id="chart-bubble"></canvas></div></section>
<section><h3>Clock alignment: each rank's offset and its uncertainty</h3>
<div class="chart small"><canvas id="chart-clock-offset"></canvas></div><div class="chart small"><canvas id="chart-clock-uncertainty"></canvas></div></section>
)";
  html += waves;
  html += "<section><h3>lens analyze</h3><pre id=\"analyze\">" + html_escape(format_table(a)) +
          "</pre></section>\n<pre id=\"rendered\" hidden></pre>\n";
  html += "<script type=\"application/json\" id=\"lens-data\">" + data_text + "</script>\n";
  // Draws the charts from the data element, then records what they hold in
  // #rendered (for tests and for reading without a canvas).
  html += "<script>\n" + std::string(assets::kReportDrawJs) + "</script>\n";
  html += "</body></html>\n";
  return html;
}

}  // namespace

Report render_report(const OpenedRun& run, const ReportOptions& options) {
  const std::string chart_js = read_chart_js(options.chart_js);
  Report report;
  ClockAlignment alignment;
  if (!options.raw_clock) alignment = read_clock_alignment(run);
  AnalyzeOptions ao;
  ao.raw_clock = options.raw_clock;
  ao.clock = &alignment;
  ao.progress = options.progress;
  const Analysis a = analyze_run(run, ao, &report.warnings);
  report.steps = a.step_rows.size();
  report.clock = a.clock.describe();
  const std::size_t max_points = std::max<std::size_t>(options.max_points, 1);
  report.bucket = std::max<std::size_t>(1, (report.steps + max_points - 1) / max_points);

  json data;
  add_step_chart(a, report.bucket, data);
  const json stages = stage_charts(a, report.bucket);
  data["stages"] = stages;
  data["bubble"] = bubble_chart(a, report.bucket);
  data["clock"] = clock_chart(alignment, max_points);
  const std::string waves = wave_sections(run, a, alignment, report);
  report.html = page("lens report: " + run.input().string(), a, chart_js, report.bucket,
                     stages.size(), waves, data);
  return report;
}

}  // namespace lens::tools
