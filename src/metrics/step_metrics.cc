// A rank's step figures as metrics (lens/step_metrics.h).
#include "lens/step_metrics.h"

#include <array>
#include <bit>
#include <cmath>
#include <string>

namespace lens {
namespace {

const char* figure_help(StepFigure f) {
  switch (f) {
    case StepFigure::kCompute:
      return "Forward and backward time of one step on this rank.";
    case StepFigure::kP2pWait:
      return "Time one step on this rank spent in pipeline receives (waiting for the peer stage "
             "included).";
    case StepFigure::kP2pSend:
      return "Time one step on this rank spent in pipeline sends.";
    case StepFigure::kAllReduce:
      return "Time of one step's data-parallel gradient all-reduce on this rank.";
    case StepFigure::kOptimizer:
      return "Time of one step's optimizer on this rank.";
    case StepFigure::kNone:
      break;
  }
  return "";
}

}  // namespace

StepMetrics::StepMetrics(MetricRegistry& registry, const MetricLabels& labels)
    : step_(registry.histogram("lens_step_duration_seconds",
                               "Time of one training step on this rank.", "seconds", kStepBounds,
                               labels)),
      steps_(registry.counter("lens_steps", "Training steps this rank has run.", labels)),
      spans_ended_(registry.counter("lens_spans_ended", "Spans this rank has ended.", labels)),
      spans_dropped_(registry.counter(
          "lens_spans_dropped",
          "Spans this rank ended and could not deliver (queue full, shutdown, export error).",
          labels)) {
  static_assert(kWords == 1 + kStepFigureCount * kHistogramWords + 3);
  for (int i = 1; i < kStepFigureCount; ++i) {
    const auto f = static_cast<StepFigure>(i);
    const std::string name = "lens_step_" + std::string(step_figure_name(f)) + "_seconds";
    figures_[i] = &registry.histogram(name, figure_help(f), "seconds", kStepBounds, labels);
    // OpenTelemetry's name keeps the figure's name one word.
    registry.set_otel_name(name, "lens.step." + std::string(step_figure_name(f)));
  }
}

void StepMetrics::record_step(double step_seconds, const StepFigureTotals& figures,
                              const SpanContext& step, std::int64_t time_unix_ns) {
  step_.record(step_seconds, step, time_unix_ns);
  for (int i = 1; i < kStepFigureCount; ++i) {
    if (figures.spans[i] == 0) continue;
    figures_[i]->record(figures.seconds(static_cast<StepFigure>(i)), step, time_unix_ns);
  }
  steps_.add();
}

void StepMetrics::record_spans(std::uint64_t ended, std::uint64_t dropped) {
  spans_ended_.advance_to(static_cast<double>(ended));
  spans_dropped_.advance_to(static_cast<double>(dropped));
}

namespace {

constexpr std::int64_t kVersion = 0x4c454e53'00000001;  // "LENS", 1

std::int64_t bits(double v) { return std::bit_cast<std::int64_t>(v); }
double real(std::int64_t v) { return std::bit_cast<double>(v); }

std::uint64_t id_word(const std::uint8_t* b) {
  std::uint64_t w = 0;
  for (int i = 0; i < 8; ++i) w = (w << 8) | b[i];
  return w;
}
void put_id_word(std::uint8_t* b, std::uint64_t w) {
  for (int i = 7; i >= 0; --i, w >>= 8) b[i] = static_cast<std::uint8_t>(w);
}

void encode_histogram(const Histogram& h, std::vector<std::int64_t>& out) {
  const Histogram::Snapshot s = h.snapshot();
  for (std::uint64_t c : s.counts) out.push_back(static_cast<std::int64_t>(c));
  out.push_back(static_cast<std::int64_t>(s.count));
  out.push_back(bits(s.sum));
  // Its latest exemplar: the one a dashboard wants for this rank.
  const MetricExemplar* latest = nullptr;
  for (const auto& e : s.exemplars)
    if (e && (latest == nullptr || e->time_unix_ns > latest->time_unix_ns)) latest = &*e;
  if (latest == nullptr) {
    out.insert(out.end(), 6, 0);
    return;
  }
  out.push_back(1);
  out.push_back(bits(latest->value));
  out.push_back(latest->time_unix_ns);
  out.push_back(static_cast<std::int64_t>(id_word(latest->trace_id.bytes().data())));
  out.push_back(static_cast<std::int64_t>(id_word(latest->trace_id.bytes().data() + 8)));
  out.push_back(static_cast<std::int64_t>(id_word(latest->span_id.bytes().data())));
}

// Reads one histogram's words at `w` into a snapshot; false when they do
// not make one.
bool decode_histogram(const std::int64_t* w, Histogram::Snapshot& s) {
  const std::size_t buckets = kStepBuckets.size() + 1;
  s.bounds = kStepBounds;
  s.counts.assign(buckets, 0);
  s.exemplars.assign(buckets, std::nullopt);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < buckets; ++i) {
    if (w[i] < 0) return false;
    s.counts[i] = static_cast<std::uint64_t>(w[i]);
    total += s.counts[i];
  }
  if (w[buckets] < 0 || static_cast<std::uint64_t>(w[buckets]) != total) return false;
  s.count = total;
  s.sum = real(w[buckets + 1]);
  const std::int64_t* e = w + buckets + 2;
  if (e[0] == 0) return true;
  if (e[0] != 1) return false;
  MetricExemplar x;
  x.value = real(e[1]);
  x.time_unix_ns = e[2];
  std::array<std::uint8_t, 16> trace{};
  put_id_word(trace.data(), static_cast<std::uint64_t>(e[3]));
  put_id_word(trace.data() + 8, static_cast<std::uint64_t>(e[4]));
  std::array<std::uint8_t, 8> span{};
  put_id_word(span.data(), static_cast<std::uint64_t>(e[5]));
  x.trace_id = TraceId(trace);
  x.span_id = SpanId(span);
  if (!x.trace_id.valid() || !x.span_id.valid() || std::isnan(x.value)) return false;
  // In the bucket its value falls in, as a record would put it.
  std::size_t bucket = 0;
  while (bucket < kStepBounds.size() && x.value > kStepBounds[bucket]) ++bucket;
  s.exemplars[bucket] = x;
  return true;
}

}  // namespace

std::vector<std::int64_t> StepMetrics::encode() const {
  std::vector<std::int64_t> out;
  out.reserve(kWords);
  out.push_back(kVersion);
  encode_histogram(step_, out);
  for (int i = 1; i < kStepFigureCount; ++i) encode_histogram(*figures_[i], out);
  out.push_back(bits(steps_.value()));
  out.push_back(bits(spans_ended_.value()));
  out.push_back(bits(spans_dropped_.value()));
  return out;
}

bool StepMetrics::assign(const std::vector<std::int64_t>& words) {
  if (words.size() != kWords || words[0] != kVersion) return false;
  std::array<Histogram::Snapshot, kStepFigureCount> snapshots;
  for (std::size_t h = 0; h < snapshots.size(); ++h)
    if (!decode_histogram(words.data() + 1 + h * kHistogramWords, snapshots[h])) return false;
  step_.assign(snapshots[0]);
  for (int i = 1; i < kStepFigureCount; ++i) figures_[i]->assign(snapshots[i]);
  const std::int64_t* counters = words.data() + 1 + kStepFigureCount * kHistogramWords;
  steps_.advance_to(real(counters[0]));
  spans_ended_.advance_to(real(counters[1]));
  spans_dropped_.advance_to(real(counters[2]));
  return true;
}

}  // namespace lens
