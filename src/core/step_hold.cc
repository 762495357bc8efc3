// Tail selection's hold of recent steps (step_hold.h).
#include "step_hold.h"

#include <algorithm>

#include "live_span.h"

namespace lens::detail {
namespace {

// Settled steps kept for the spans that end after the choice (a step span
// ends after the meeting that chose it): this many per step held at once.
constexpr std::size_t kSettledKeptPerHeld = 4;

bool contains(const std::vector<std::uint64_t>& steps, std::uint64_t step) {
  return std::find(steps.begin(), steps.end(), step) != steps.end();
}

std::size_t attributes_bytes(const Attributes& attributes) {
  std::size_t n = attributes.capacity() * sizeof(Attribute);
  for (const Attribute& a : attributes) n += a.key.capacity();
  return n;
}

}  // namespace

std::size_t StepHold::approx_bytes(const LiveSpan& s) {
  std::size_t n = sizeof(LiveSpan) + s.name.capacity() + attributes_bytes(s.attributes);
  n += s.events.capacity() * sizeof(SpanEvent) + s.links.capacity() * sizeof(SpanLink);
  for (const SpanEvent& e : s.events) n += e.name.capacity() + attributes_bytes(e.attributes);
  for (const SpanLink& l : s.links) n += attributes_bytes(l.attributes);
  return n;
}

StepHold::Step* StepHold::find(const TraceId& trace) {
  const auto it = by_trace_.find(trace);
  return it == by_trace_.end() ? nullptr : it->second;
}

void StepHold::hold(std::uint64_t step, const TraceId& trace) {
  std::lock_guard<std::mutex> lock(mu_);
  if (find(trace) != nullptr) return;
  Step& s = steps_.emplace_back();
  s.step = step;
  s.trace = trace;
  by_trace_[trace] = &s;
  if (waiting_ >= options_.max_steps) {
    s.state = State::kRefused;
    ++stats_.steps_refused;
  } else {
    ++waiting_;
    ++stats_.steps_held;
  }
  // Forget the oldest settled steps past what late spans may still need.
  const std::size_t cap = (kSettledKeptPerHeld + 1) * options_.max_steps;
  while (steps_.size() > cap) {
    const Step& old = steps_.front();
    if (old.state == State::kHeld || old.settled_pending) break;
    by_trace_.erase(old.trace);
    steps_.pop_front();
  }
}

void StepHold::settle(const std::vector<std::uint64_t>& keep,
                      const std::vector<std::uint64_t>& drop) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Step& s : steps_) {
    if (s.state != State::kHeld) continue;
    if (contains(keep, s.step)) {
      s.state = State::kKept;
      ++stats_.steps_kept;
    } else if (contains(drop, s.step)) {
      s.state = State::kNotSelected;
      ++stats_.steps_not_selected;
    } else {
      continue;
    }
    --waiting_;
    s.settled_pending = true;
  }
}

StepHold::Sorted StepHold::sort(const std::vector<LiveSpan*>& taken, std::vector<LiveSpan*>& out,
                                std::vector<LiveSpan*>& release) {
  Sorted sorted;
  std::lock_guard<std::mutex> lock(mu_);
  for (LiveSpan* span : taken) {
    Step* s = find(span->context.trace_id);
    if (s == nullptr) {
      out.push_back(span);
      continue;
    }
    switch (s->state) {
      case State::kKept:
        out.push_back(span);
        ++stats_.spans_kept;
        break;
      case State::kNotSelected:
        release.push_back(span);
        ++sorted.not_selected;
        ++stats_.spans_not_selected;
        break;
      case State::kRefused:
        release.push_back(span);
        ++sorted.no_room;
        ++stats_.spans_no_room;
        break;
      case State::kHeld: {
        const std::size_t size = approx_bytes(*span);
        if (!s->out_of_room && bytes_ + size > options_.max_bytes) {
          s->out_of_room = true;
          ++stats_.steps_over_bytes;
        }
        if (s->out_of_room) {
          release.push_back(span);
          ++sorted.no_room;
          ++stats_.spans_no_room;
          break;
        }
        s->parked.push_back(span);
        s->bytes += size;
        bytes_ += size;
        stats_.bytes_peak = std::max<std::uint64_t>(stats_.bytes_peak, bytes_);
        break;
      }
    }
  }
  return sorted;
}

std::uint64_t StepHold::collect_settled(std::vector<LiveSpan*>& out,
                                        std::vector<LiveSpan*>& release) {
  std::uint64_t not_selected = 0;
  std::lock_guard<std::mutex> lock(mu_);
  for (Step& s : steps_) {
    if (!s.settled_pending) continue;
    s.settled_pending = false;
    if (s.state == State::kKept) {
      out.insert(out.end(), s.parked.begin(), s.parked.end());
      stats_.spans_kept += s.parked.size();
    } else {
      release.insert(release.end(), s.parked.begin(), s.parked.end());
      not_selected += s.parked.size();
      stats_.spans_not_selected += s.parked.size();
    }
    bytes_ -= s.bytes;
    s.bytes = 0;
    s.parked.clear();
    s.parked.shrink_to_fit();
  }
  return not_selected;
}

void StepHold::release_undecided(std::vector<LiveSpan*>& out) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Step& s : steps_) {
    if (s.state != State::kHeld) continue;
    s.state = State::kKept;  // what ends from here on goes out too
    --waiting_;
    ++stats_.steps_undecided;
    out.insert(out.end(), s.parked.begin(), s.parked.end());
    stats_.spans_kept += s.parked.size();
    bytes_ -= s.bytes;
    s.bytes = 0;
    s.parked.clear();
  }
}

StepHoldStats StepHold::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace lens::detail
