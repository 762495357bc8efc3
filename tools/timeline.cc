#include "timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>

#include "lens_assets.h"
#include "step_analysis.h"
#include "lens/semconv.h"

namespace lens::tools {

using namespace lens::analysis;  // the readers this command is a front of

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

constexpr int kLeft = 110, kWidth = 1300, kRowHeight = 16, kLaneGap = 14, kTop = 40;

}  // namespace

namespace {

// Where the wave is drawn: the chosen steps, their time window and scale,
// and a lane per rank (ordered by stage, then rank: a stage's TP peers and
// replicas side by side).
struct WaveFrame {
  std::vector<const StepView*> steps;
  std::int64_t t0 = 0, t1 = 1;
  double scale = 1;
  std::map<int, int> stage_of, lane_y;
  std::vector<int> lanes;
  int height = 0;
  double x_of(std::int64_t t) const { return kLeft + (t - t0) * scale; }
};

WaveFrame frame_of(const PipelineView& view, const TimelineOptions& o) {
  WaveFrame f;
  // The time window: every span of the chosen steps.
  std::int64_t t0 = std::numeric_limits<std::int64_t>::max(), t1 = 0;
  for (const auto& sv : view.steps) {
    if (sv.step < o.first_step || sv.step > o.last_step) continue;
    f.steps.push_back(&sv);
    for (const auto& [rank, sr] : sv.ranks)
      for (const SpanRow* s : sr.spans) {
        t0 = std::min(t0, s->start_ns);
        t1 = std::max(t1, s->end_ns);
      }
  }
  if (f.steps.empty() || t1 <= t0) {  // nothing to draw (the caller says so): any 1 ns window
    t0 = f.steps.empty() ? 0 : t0;
    t1 = t0 + 1;
  }
  f.t0 = t0;
  f.t1 = t1;
  f.scale = static_cast<double>(kWidth) / static_cast<double>(t1 - t0);
  for (const auto* sv : f.steps)
    for (const auto& [rank, sr] : sv->ranks) f.stage_of[rank] = sr.stage;
  f.lanes.assign(view.ranks.begin(), view.ranks.end());
  std::sort(f.lanes.begin(), f.lanes.end(), [&](int a, int b) {
    return std::make_pair(f.stage_of.count(a) ? f.stage_of[a] : 1 << 30, a) <
           std::make_pair(f.stage_of.count(b) ? f.stage_of[b] : 1 << 30, b);
  });
  const int lane_height = kLaneRows * kRowHeight + kLaneGap;
  for (std::size_t i = 0; i < f.lanes.size(); ++i)
    f.lane_y[f.lanes[i]] = kTop + static_cast<int>(i) * lane_height;
  f.height = kTop + static_cast<int>(f.lanes.size()) * lane_height + 40;
  return f;
}

// Each lane's background and label.
std::string lane_labels(WaveFrame& f, const TimelineOptions& o, bool tensor_parallel) {
  std::string svg;
  for (int rank : f.lanes) {
    std::string place =
        f.stage_of.count(rank) ? " · stage " + std::to_string(f.stage_of[rank]) : std::string();
    const auto p = o.pipeline_of.find(rank);
    if (tensor_parallel && p != o.pipeline_of.end())
      place += fmt::format(" · dp {} tp {}", p->second.replica, p->second.tensor);
    svg += fmt::format(
        "<g class=\"lane\" data-rank=\"{}\" data-stage=\"{}\"><rect class=\"lane-bg\" x=\"0\" "
        "y=\"{}\" width=\"{}\" height=\"{}\"/><text x=\"6\" y=\"{}\">rank {}{}</text></g>\n",
        rank, f.stage_of.count(rank) ? f.stage_of[rank] : -1, f.lane_y[rank] - 4,
        kLeft + kWidth + 10, kLaneRows * kRowHeight + 8, f.lane_y[rank] + 2 * kRowHeight + 4, rank,
        place);
  }
  return svg;
}

// The step analysis drawn: waits under the spans, the critical path over
// them.
struct AnalysisLayers {
  std::string waits, critical;
  std::size_t critical_segments = 0;
};

AnalysisLayers analysis_layers(const PipelineView& view, WaveFrame& f, const TimelineOptions& o) {
  AnalysisLayers out;
  for (const auto* sv : f.steps) {
    int stages = view.pipeline_stages;
    for (const auto& [rank, sr] : sv->ranks) stages = std::max(stages, sr.stage + 1);
    const StepAnalysis a = analyze_step(*sv, stages, o.pipeline_of);
    for (const auto& w : a.waits) {
      if (!f.lane_y.count(w.rank)) continue;
      const char* css = "wait-transfer";
      std::string what = "transfer";
      switch (w.kind) {
        case WaitInterval::Kind::kLateSender:
          css = "wait-late-sender";
          what = "late sender: the receive waited for the send to begin";
          break;
        case WaitInterval::Kind::kLateReceiver:
          css = "wait-late-receiver";
          what = "late receiver: the send waited for the receive to be posted";
          break;
        case WaitInterval::Kind::kCollective:
          css = "wait-collective";
          what = fmt::format("wait at collective: for TP rank {} to arrive", w.peer);
          break;
        case WaitInterval::Kind::kTransfer:
          break;
      }
      // Collective waits lie inside a compute: drawn in the p2p row.
      const SpanKind row =
          w.kind == WaitInterval::Kind::kCollective ? SpanKind::kP2p : SpanKind::kForward;
      out.waits += fmt::format(
          "<rect class=\"{}\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\"><title>{} "
          "{:.3f} ms (stage {}, step {})</title></rect>\n",
          css, f.x_of(w.start_ns), f.lane_y[w.rank] + lane_row(row) * kRowHeight,
          std::max(1.0, (w.end_ns - w.start_ns) * f.scale), kRowHeight - 3, html_escape(what),
          (w.end_ns - w.start_ns) / 1e6, w.stage, sv->step);
    }
    for (const auto& seg : a.critical_path) {
      if (!f.lane_y.count(seg.rank)) continue;
      const bool transfer = seg.kind == PathSegment::Kind::kTransfer;
      out.critical += fmt::format(
          "<rect class=\"critical{}\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\"/>\n",
          transfer ? " transfer" : "", f.x_of(seg.start_ns),
          f.lane_y[seg.rank] + lane_row(transfer ? SpanKind::kP2p : SpanKind::kForward) * kRowHeight,
          std::max(1.0, (seg.end_ns - seg.start_ns) * f.scale), kRowHeight - 3);
      ++out.critical_segments;
    }
  }
  return out;
}

// The spans, and the arrows of the linked receives to the source's step
// span; with the links drawn and the model chunks seen (interleaved
// schedule).
struct SpanLayers {
  std::string spans, arrows;
  std::size_t links = 0;
  std::int64_t chunks = 0;
};

SpanLayers span_layers(const PipelineView& view, WaveFrame& f, const std::string& id) {
  SpanLayers out;
  for (const auto* sv : f.steps) {
    const StepOnRank* source = nullptr;
    for (const auto& [rank, sr] : sv->ranks)
      if (!source || sr.rank < source->rank) source = &sr;
    for (const auto& [rank, sr] : sv->ranks) {
      for (const SpanRow* s : sr.spans) {
        const SpanKind k = kind_of(*s);
        const double x = f.x_of(s->start_ns);
        const double w = std::max(1.0, (s->end_ns - s->start_ns) * f.scale);
        const int y = f.lane_y[rank] + lane_row(k) * kRowHeight;
        std::string detail = fmt::format("{} | rank {} | step {} | {:.3f} ms", s->name, rank,
                                         sv->step, (s->end_ns - s->start_ns) / 1e6);
        if (s->has(semconv::kMicrobatchId))
          detail += " | microbatch " + std::string(*s->attributes.text(semconv::kMicrobatchId));
        // The interleaved schedule's model chunk: a shade of the kind's
        // colour per chunk (chunk-0 .. chunk-3, then round again).
        std::string chunk;
        if (s->has(semconv::kVirtualPipelineRank)) {
          const std::int64_t v =
              std::max<std::int64_t>(0, s->int_attr(semconv::kVirtualPipelineRank));
          detail += " | chunk " + std::to_string(v);
          chunk = fmt::format(" chunk-{}\" data-chunk=\"{}", v % 4, v);
          out.chunks = std::max(out.chunks, v + 1);
        }
        const std::string shown = html_escape(detail);
        out.spans += fmt::format(
            "<rect class=\"span {}{}\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" "
            "data-detail=\"{}\"><title>{}</title></rect>\n",
            kind_name(k), chunk, x, y, w, kRowHeight - 3, shown, shown);
        if (k == SpanKind::kLinked && source && s->links.size() == 1) {
          const SpanRow* target = view.by_span_id.count(s->links[0].second)
                                      ? view.by_span_id.at(s->links[0].second)
                                      : nullptr;
          if (target && f.lane_y.count(target->rank)) {
            out.arrows += fmt::format(
                "<path class=\"link\" d=\"M {:.2f} {} C {:.2f} {}, {:.2f} {}, {:.2f} {}\" "
                "marker-end=\"url(#{}-arrow)\"><title>link from {} (rank {}) to rank {}'s "
                "step span</title></path>\n",
                f.x_of(target->start_ns), f.lane_y[target->rank] + kRowHeight / 2,
                f.x_of(target->start_ns) + 30, f.lane_y[target->rank] + kRowHeight, x - 30, y, x,
                y + (kRowHeight - 3) / 2, id, html_escape(s->name), rank, target->rank);
            ++out.links;
          }
        }
      }
    }
  }
  return out;
}

// The time axis: ten ticks over the window.
std::string time_axis(const WaveFrame& f) {
  std::string axis;
  const double total_ms = (f.t1 - f.t0) / 1e6;
  for (int i = 0; i <= 10; ++i) {
    const double x = kLeft + kWidth * i / 10.0;
    axis += fmt::format(
        "<line class=\"tick\" x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\"/><text "
        "class=\"axis\" x=\"{:.1f}\" y=\"{}\">{:.1f} ms</text>\n",
        x, kTop - 10, x, f.height - 30, x - 12, kTop - 14, total_ms * i / 10.0);
  }
  return axis;
}

}  // namespace

Wave render_wave(const PipelineView& view, const TimelineOptions& o, const std::string& id) {
  WaveFrame f = frame_of(view, o);
  bool tensor_parallel = false;
  for (const auto& [rank, p] : o.pipeline_of) tensor_parallel |= p.tensor > 0;
  const std::string labels = lane_labels(f, o, tensor_parallel);
  const AnalysisLayers analysis = analysis_layers(view, f, o);
  const SpanLayers spans = span_layers(view, f, id);

  Wave wave;
  wave.lanes = f.lanes.size();
  wave.links = spans.links;
  wave.critical_segments = analysis.critical_segments;
  wave.chunks = spans.chunks;
  wave.tensor_parallel = tensor_parallel;
  wave.svg = fmt::format(
      "<svg id=\"{}\" class=\"wave\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" "
      "height=\"{}\" data-lanes=\"{}\" data-links=\"{}\" data-critical=\"{}\">\n",
      id, kLeft + kWidth + 20, f.height, f.lanes.size(), spans.links,
      analysis.critical_segments);
  wave.svg += fmt::format(
      R"(<defs><marker id="{}-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#8e44ad"/></marker></defs>
)",
      id);
  wave.svg += time_axis(f) + labels + analysis.waits + spans.spans + analysis.critical +
              spans.arrows + "</svg>\n";
  return wave;
}

std::string wave_style() { return std::string(assets::kWaveCss); }

std::string wave_legend(const Wave& wave) {
  return std::string(R"(<div class="legend">)") +
         R"(<span style="background:#3d7dd8"></span>forward<span style="background:#3aa564"></span>backward)" +
         R"(<span style="background:#e8912d"></span>optimizer<span style="background:#9a9a9a"></span>p2p)" +
         R"(<span style="background:#8e44ad"></span>linked recv (arrow: link to the source's step span))" +
         R"(<span style="background:#c9ccd3"></span>step)" +
         R"(<span style="border:2px solid #d62728;width:9px;height:9px"></span>critical path)" +
         R"(<span style="background:#f4c7c3"></span>waiting for a neighbour's compute)" +
         R"(<span style="background:#fde9c4"></span>waiting for the transfer)" +
         (wave.tensor_parallel
              ? std::string(
                    R"(<span style="background:#17becf"></span>TP collective<span style="background:#e377c2"></span>waiting at it for the last TP peer)")
              : std::string()) +
         (wave.chunks > 1
              ? fmt::format(
                    R"(<span style="background:#3d7dd8;opacity:0.55"></span>lighter or outlined: model chunks 1 to {} (interleaved schedule; chunk 0 full colour))",
                    wave.chunks - 1)
              : std::string()) +
         "</div>\n";
}

std::string render_timeline(const PipelineView& view, const TimelineOptions& o) {
  const Wave wave = render_wave(view, o, "wave");
  std::string html = "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>" +
                     html_escape(o.title) + "</title>\n";
  html += "<style>\n" + std::string(assets::kTimelineCss) + wave_style() + "</style></head><body>\n";
  html += "<h3>" + html_escape(o.title) + "</h3>\n" + wave_legend(wave) + wave.svg +
          "<div id=\"detail\"></div>\n";
  html += "<script>\n" + std::string(assets::kTimelineJs) + "</script>\n</body></html>\n";
  return html;
}

}  // namespace lens::tools
