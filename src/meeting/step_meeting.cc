// StepMeeting: the ranks' meeting every few steps (step_meeting.h).
#include "lens/step_meeting.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "byte_order.h"
#include "lens/error.h"
#include "lens/semconv.h"

namespace lens {

namespace {

// Without the live rule or tail selection's own cadence, a job that asks
// for meetings meets every this many steps.
constexpr int kDefaultEvery = 10;

std::int64_t bits_of(double v) { return std::bit_cast<std::int64_t>(v); }
double double_of(std::int64_t w) { return std::bit_cast<double>(w); }

// The tail choice as a lens span (outside every step's trace, so it is
// exported whatever is chosen).
void record_choice(Telemetry& telemetry, const std::vector<std::uint64_t>& steps,
                   const TailChoice& choice) {
  StartOptions root;  // not in the step's trace, which may be one not selected
  root.root = true;
  Span span = telemetry.tracer().start_lens_span(semconv::kTailSelectionSpan, root);
  span.set_attribute("lens.tail.first_step", static_cast<std::int64_t>(steps.front()));
  span.set_attribute("lens.tail.last_step", static_cast<std::int64_t>(steps.back()));
  span.set_attribute("lens.tail.held", static_cast<std::int64_t>(steps.size()));
  span.set_attribute("lens.tail.not_selected", static_cast<std::int64_t>(choice.drop.size()));
  std::string kept;
  for (const TailChoice::Kept& k : choice.kept)
    kept += (kept.empty() ? "" : ",") + std::to_string(k.step) + ":" + k.reason;
  span.set_attribute("lens.tail.kept", kept);
}

// A straggler named live, on the step span where it was named.
void add_straggler_event(Span& step, const LiveStraggler& s) {
  step.add_event("lens.straggler",
                 {{semconv::kRank, std::int64_t{s.who.rank}},
                  {semconv::kPipelineRank, std::int64_t{s.who.stage}},
                  {semconv::kDataRank, std::int64_t{s.who.replica}},
                  {semconv::kTensorRank, std::int64_t{s.who.tensor}},
                  {"lens.factor", s.factor},
                  {"lens.against", std::string(s.against_peers ? "peers" : "own start")}});
}

}  // namespace

StepMeeting::StepMeeting(Telemetry* telemetry, Communicator& world, StepMeetingOptions options)
    : telemetry_(telemetry), world_(world), options_(std::move(options)) {
  if (options_.live_every < 0)
    throw ConfigError("StepMeetingOptions::live_every of " + std::to_string(options_.live_every) +
                      " is not valid; accepted: 0 (off) or more");
  if (options_.timeout && options_.timeout->count() < 1)
    throw ConfigError("StepMeetingOptions::timeout of " + std::to_string(options_.timeout->count()) +
                      " ms is not valid; accepted: at least 1 ms");
  timeout_ = options_.timeout.value_or(telemetry_ ? telemetry_->config().collective_timeout
                                                  : std::chrono::milliseconds(300000));
  if (options_.who.empty()) options_.who = "lens: rank " + std::to_string(world_.rank());
  if (options_.live_every > 0) {
    if (options_.ranks.size() != static_cast<std::size_t>(world_.size()))
      throw ConfigError("StepMeetingOptions::ranks holds " + std::to_string(options_.ranks.size()) +
                        " places for " + std::to_string(world_.size()) +
                        " ranks; accepted: one per rank of the communicator");
    try {
      rule_ = std::make_unique<LiveStragglerRule>(options_.ranks);
    } catch (const std::invalid_argument& e) {
      throw ConfigError(std::string("StepMeetingOptions::ranks: ") + e.what());
    }
  }
  // Tail selection is agreed at start-up, so the same on every rank.
  if (telemetry_ != nullptr && telemetry_->config().tail_selection) {
    const Config& c = telemetry_->config();
    selector_ = std::make_unique<TailSelector>(c.tail_keep, c.tail_baseline_percent, c.run_key);
  }
  if (options_.live_every > 0)
    every_ = options_.live_every;
  else if (selector_ || options_.extra_words)
    every_ = kDefaultEvery;
}

StepMeeting::~StepMeeting() = default;

std::string StepMeeting::hold_warning() const {
  if (!selector_) return {};
  const std::uint32_t held = telemetry_->config().batch.hold.max_steps;
  if (held >= static_cast<std::uint32_t>(every_)) return {};
  return "LENS_TAIL_HOLD_STEPS is " + std::to_string(held) + ", fewer than the " +
         std::to_string(every_) +
         " steps between meetings: the steps past it in each window are not held, and lost if "
         "chosen";
}

bool StepMeeting::step_done(std::uint64_t step, double compute_ms, double step_seconds) {
  if (every_ == 0) return false;
  window_compute_ms_.push_back(compute_ms);
  if (selector_) {
    window_steps_.push_back(step);
    window_seconds_.push_back(step_seconds);
  }
  return static_cast<int>(window_compute_ms_.size()) == every_;
}

MeetingOutcome StepMeeting::meet(std::int64_t step, Span* step_span) {
  return gather(step, step_span, false);
}

std::optional<MeetingOutcome> StepMeeting::finish(std::int64_t last_step) {
  if (window_steps_.empty() && !options_.extra_words) return std::nullopt;
  return gather(last_step, nullptr, true);
}

MeetingOutcome StepMeeting::gather(std::int64_t step, Span* step_span, bool last) {
  // This rank's words: the window's median compute (NaN when there is no
  // verdict to reach), then with tail selection a time for each of the
  // window's steps (NaN past the held ones), then the extra words.
  std::vector<std::int64_t> mine;
  double median = std::numeric_limits<double>::quiet_NaN();
  if (!window_compute_ms_.empty() && !last) {
    std::sort(window_compute_ms_.begin(), window_compute_ms_.end());
    median = window_compute_ms_[window_compute_ms_.size() / 2];
  }
  window_compute_ms_.clear();
  mine.push_back(bits_of(median));
  if (selector_)
    for (int i = 0; i < every_; ++i)
      mine.push_back(bits_of(i < static_cast<int>(window_seconds_.size())
                                 ? window_seconds_[static_cast<std::size_t>(i)]
                                 : std::numeric_limits<double>::quiet_NaN()));
  const std::size_t extra_at = mine.size();
  if (options_.extra_words) {
    const std::vector<std::int64_t> words = options_.extra_words();
    mine.insert(mine.end(), words.begin(), words.end());
  }

  const std::size_t n = mine.size();
  const auto ranks = static_cast<std::size_t>(world_.size());
  std::vector<std::uint8_t> input(n * 8), output(ranks * n * 8);
  for (std::size_t i = 0; i < n; ++i)
    detail::put_le64(input.data() + i * 8, static_cast<std::uint64_t>(mine[i]));
  try {
    world_.all_gather(input, output, timeout_);
  } catch (const CommError& e) {
    if (telemetry_ != nullptr)
      write_failure_record(*telemetry_, options_.who,
                           std::string("the live meeting's all-gather: ") + e.what());
    throw;
  }
  const auto word = [&](std::size_t r, std::size_t i) {
    return static_cast<std::int64_t>(detail::get_le64(output.data() + (r * n + i) * 8));
  };

  MeetingOutcome outcome;
  if (rule_ && !last) {
    std::vector<double> medians;
    for (std::size_t r = 0; r < ranks; ++r) medians.push_back(double_of(word(r, 0)));
    outcome.stragglers = rule_->observe(step, medians);
    if (world_.rank() == 0 && step_span != nullptr)
      for (const LiveStraggler& s : outcome.stragglers) add_straggler_event(*step_span, s);
    for (std::size_t r = 0; r < ranks; ++r) outcome.scores.push_back(rule_->score(static_cast<int>(r)));
  }
  if (selector_ && !window_steps_.empty()) {
    std::vector<std::vector<double>> seconds(ranks);
    for (std::size_t r = 0; r < ranks; ++r)
      for (std::size_t i = 0; i < window_steps_.size(); ++i)
        seconds[r].push_back(double_of(word(r, 1 + i)));
    settle(seconds);
  }
  window_steps_.clear();
  window_seconds_.clear();
  if (options_.extra_words)
    for (std::size_t r = 0; r < ranks; ++r) {
      std::vector<std::int64_t> words;
      for (std::size_t i = extra_at; i < n; ++i) words.push_back(word(r, i));
      outcome.words.push_back(std::move(words));
    }
  return outcome;
}

void StepMeeting::settle(const std::vector<std::vector<double>>& seconds) {
  const TailChoice choice = selector_->choose(window_steps_, seconds);
  telemetry_->settle_steps(choice.keep, choice.drop);
  record_choice(*telemetry_, window_steps_, choice);
}

}  // namespace lens
