// Megatron-LM's own traces, correlated after the fact (upstream_steps.h).
#include "upstream_steps.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <tuple>

#include "span_kind.h"
#include "rank_order.h"
#include "lens/semconv.h"

namespace lens::analysis {
namespace {

using json = nlohmann::json;

std::string name_of(const json& span) {
  const auto n = span.find("name");
  return n != span.end() && n->is_string() ? n->get<std::string>() : std::string();
}

// The value of a span's (or resource's) attribute `key`; null when absent.
template <typename Json>
Json* attribute(Json& span, const std::string& key) {
  auto attrs = span.find("attributes");
  if (attrs == span.end() || !attrs->is_array()) return nullptr;
  for (auto& a : *attrs)
    if (a.is_object() && a.value("key", "") == key)
      if (auto v = a.find("value"); v != a.end()) return &*v;
  return nullptr;
}

// An attribute's value as an integer (intValue as text or number, or a
// string of digits); nullopt otherwise.
std::optional<std::int64_t> int_value(const json* v) {
  if (v == nullptr || !v->is_object()) return std::nullopt;
  for (const char* k : {"intValue", "stringValue"})
    if (auto it = v->find(k); it != v->end()) {
      try {
        if (it->is_number_integer()) return it->get<std::int64_t>();
        if (it->is_string()) {
          std::size_t used = 0;
          const std::string s = it->get<std::string>();
          const long long x = std::stoll(s, &used);
          if (used == s.size()) return x;
        }
      } catch (const std::exception&) {
      }
    }
  if (auto it = v->find("doubleValue"); it != v->end() && it->is_number()) {
    const double d = it->get<double>();
    if (d == static_cast<double>(static_cast<std::int64_t>(d))) return static_cast<std::int64_t>(d);
  }
  return std::nullopt;
}

// Sets an attribute the span does not have (what the span says wins).
void set_default(json& span, const std::string& key, const json& value) {
  if (attribute(span, key) != nullptr) return;
  if (!span.contains("attributes") || !span["attributes"].is_array())
    span["attributes"] = json::array();
  span["attributes"].push_back({{"key", key}, {"value", value}});
}

json int_attr(std::int64_t v) { return {{"intValue", std::to_string(v)}}; }
json str_attr(const std::string& v) { return {{"stringValue", v}}; }

// A span's time field (0 when it does not read).
std::int64_t time_of(const json& span, const char* key) {
  try {
    const auto& v = span.at(key);
    return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<std::int64_t>();
  } catch (const std::exception&) {
    return 0;
  }
}
std::int64_t start_of(const json& span) { return time_of(span, "startTimeUnixNano"); }
std::int64_t end_of(const json& span) { return time_of(span, "endTimeUnixNano"); }


// p2p spans: (direction, counter index, the attribute of the microbatch it
// carries, the peer's stage from this one)
struct P2p {
  const char* name;
  const char* direction;
  int counter;
  const char* carries;
  int peer;
};
constexpr std::array<P2p, 4> kP2p = {{
    {"megatron.p2p.recv_forward", "forward", 0, semconv::kMicrobatchIdReceived, -1},
    {"megatron.p2p.send_forward", "forward", 1, semconv::kMicrobatchIdSent, +1},
    {"megatron.p2p.recv_backward", "backward", 2, semconv::kMicrobatchIdReceived, +1},
    {"megatron.p2p.send_backward", "backward", 3, semconv::kMicrobatchIdSent, -1},
}};

}  // namespace

bool is_upstream_step_span(const json& span) {
  return span.is_object() && is_step_name(name_of(span)) &&
         attribute(span, semconv::kStep) == nullptr;
}

bool is_upstream_step_span(const SpanRow& span) {
  return is_step_name(span.name) && !span.has(semconv::kStep);
}

std::string inferred_of(const std::vector<RankFile>& files) {
  for (const auto& f : files)
    if (auto it = f.resource.find(kInferredAttribute); it != f.resource.end()) return it->second;
  return {};
}

UpstreamSteps::UpstreamSteps(std::string rank_order) : order_(std::move(rank_order)) {}

void UpstreamSteps::place(const json& resource) {
  resource_ = resource.is_object() ? resource : json::object();
  if (!resource_.contains("attributes") || !resource_["attributes"].is_array())
    resource_["attributes"] = json::array();
  json& r = resource_;
  const auto get = [&](const char* key) { return int_value(attribute(r, key)); };
  const auto rank = get(semconv::kRank);
  if (!rank) return;
  rank_ = static_cast<int>(*rank);
  std::array<int, kParallelDims> sizes{};
  const char* keys[kParallelDims] = {semconv::kTensorSize, semconv::kContextSize,
                                     semconv::kExpertSize, semconv::kDataSize,
                                     semconv::kPipelineSize};
  for (std::size_t d = 0; d < kParallelDims; ++d)
    sizes[d] = static_cast<int>(get(keys[d]).value_or(1));
  const auto world = get(semconv::kWorldSize);
  try {
    const RankPlace p = place_rank(rank_, world ? static_cast<int>(*world) : -1, sizes, order_);
    stage_ = p.coord(ParallelDim::kPp);
    stages_ = sizes[static_cast<std::size_t>(ParallelDim::kPp)];
    pipeline_source_ = p.pipeline_source;
    set_default(r, semconv::kPipelineRank, int_attr(stage_));
    set_default(r, semconv::kDataRank, int_attr(p.coord(ParallelDim::kDp)));
    set_default(r, semconv::kTensorRank, int_attr(p.coord(ParallelDim::kTp)));
    if (!world) set_default(r, semconv::kWorldSize, int_attr(p.world_size));
  } catch (const std::invalid_argument& e) {
    if (notes_.empty())
      notes_.push_back("rank " + std::to_string(rank_) + ": its place is not known (" + e.what() +
                       "); read as stage 0 of one pipeline");
  }
  set_default(r, kInferredAttribute, str_attr(kInferredWhat));
  // Every rank's step contexts were its own: no rank's step orders another's.
  set_default(r, semconv::kStepContext, str_attr("inferred"));
  placed_ = true;
}

void UpstreamSteps::add(json request, std::vector<std::string>& out) {
  auto rss = request.find("resourceSpans");
  if (rss == request.end() || !rss->is_array()) return;
  for (auto& rs : *rss) {
    if (!rs.is_object()) continue;
    if (!placed_ && rs.contains("resource")) place(rs["resource"]);
    auto scopes = rs.find("scopeSpans");
    if (scopes == rs.end() || !scopes->is_array()) continue;
    for (auto& ss : *scopes) {
      auto spans = ss.find("spans");
      if (!ss.is_object() || spans == ss.end() || !spans->is_array()) continue;
      for (auto& span : *spans) {
        if (!span.is_object()) continue;
        const std::string trace = span.value("traceId", "");
        const std::string name = name_of(span);
        if (is_step_name(name)) {
          close_step(trace, span, out);
          continue;
        }
        auto [it, fresh] = by_trace_.try_emplace(trace);
        if (fresh) trace_order_.push_back(trace);
        it->second.spans.push_back(std::move(span));
      }
    }
  }
}

void UpstreamSteps::close_step(const std::string& trace, json& step_span,
                               std::vector<std::string>& out) {
  std::vector<json> spans;
  if (auto it = by_trace_.find(trace); it != by_trace_.end()) {
    spans = std::move(it->second.spans);
    by_trace_.erase(it);
    std::erase(trace_order_, trace);
  }
  const auto iteration = int_value(attribute(step_span, semconv::kIteration));
  const std::int64_t step = iteration.value_or(counted_steps_);
  ++counted_steps_;
  ++steps_;
  set_default(step_span, semconv::kStep, int_attr(step));
  if (rank_ >= 0) set_default(step_span, semconv::kRank, int_attr(rank_));
  set_default(step_span, semconv::kPipelineRank, int_attr(stage_));
  std::stable_sort(spans.begin(), spans.end(),
                   [](const json& a, const json& b) { return start_of(a) < start_of(b); });
  // Microbatch ids by start order per direction; then each transfer carries
  // the microbatch of the compute it feeds (a receive: the next one of its
  // direction to start) or follows (a send: the last one started before
  // it). Placing by position, not by count, keeps every traced transfer on
  // its microbatch when others were not traced (upstream's combined calls).
  std::array<std::vector<std::int64_t>, 2> starts;  // forward, backward compute starts
  for (json& s : spans) {
    const std::string n = name_of(s);
    if (n == semconv::kMicrobatchForwardSpan || n == semconv::kMicrobatchBackwardSpan) {
      ++microbatch_;
      auto& list = starts[n.ends_with("forward") ? 0 : 1];
      set_default(s, semconv::kMicrobatchId, int_attr(static_cast<std::int64_t>(list.size())));
      list.push_back(start_of(s));
    }
  }
  std::array<std::int64_t, 4> seen{};
  for (json& s : spans) {
    const std::string n = name_of(s);
    for (const P2p& p : kP2p)
      if (n == p.name) {
        ++p2p_;
        ++seen[static_cast<std::size_t>(p.counter)];
        const auto& list = starts[p.direction[0] == 'f' ? 0 : 1];
        const auto next = std::lower_bound(list.begin(), list.end(), start_of(s));
        const bool receive = p.counter % 2 == 0;
        std::int64_t mb = next - list.begin();  // the next compute's id
        if (!receive) mb = std::max<std::int64_t>(mb - 1, 0);
        // What bounds the clocks: a send's start, a receive's end.
        transfers_.push_back({step, p.counter, mb, receive ? end_of(s) : start_of(s)});
        set_default(s, "dl.p2p.direction", str_attr(p.direction));
        set_default(s, semconv::kPipelinePeerRank, int_attr(stage_ + p.peer));
        set_default(s, p.carries, int_attr(mb));
        set_default(s, semconv::kMicrobatchId, int_attr(mb));
      }
  }
  // Transfers the schedule makes but the trace lacks: upstream does not
  // trace its combined steady-state calls (send_forward_recv_backward,
  // send_backward_recv_forward), so their time is a gap between spans.
  if (stages_ > 1 && p2p_ > 0)
    for (const P2p& p : kP2p) {
      const bool has_peer = p.peer < 0 ? stage_ > 0 : stage_ < stages_ - 1;
      const auto c = static_cast<std::size_t>(p.counter);
      const auto expected = static_cast<std::int64_t>(starts[p.direction[0] == 'f' ? 0 : 1].size());
      if (!has_peer) continue;
      scheduled_[c] += expected;
      untraced_[c] += std::max<std::int64_t>(expected - seen[c], 0);
    }
  spans.push_back(std::move(step_span));
  out.push_back(line_of(std::move(spans)));
}

void UpstreamSteps::finish(std::vector<std::string>& out) {
  for (const std::string& trace : trace_order_) {
    auto it = by_trace_.find(trace);
    if (it == by_trace_.end() || it->second.spans.empty()) continue;
    out.push_back(line_of(std::move(it->second.spans)));
  }
  by_trace_.clear();
  trace_order_.clear();
}

std::string UpstreamSteps::clock_sample_line(std::int64_t local_ns, std::int64_t offset_ns,
                                             std::int64_t uncertainty_ns,
                                             std::size_t messages) const {
  const auto rank = static_cast<std::int64_t>(rank_);
  // A trace of its own per rank, as a rank's clock samples are.
  char trace[33], id[17];
  std::snprintf(trace, sizeof trace, "00000000000000000000c10c%08llx",
                static_cast<unsigned long long>(rank));
  std::snprintf(id, sizeof id, "c10c0000%08llx", static_cast<unsigned long long>(rank));
  json span = {{"traceId", trace},
               {"spanId", id},
               {"name", semconv::kClockSyncSpan},
               {"startTimeUnixNano", std::to_string(local_ns)},
               {"endTimeUnixNano", std::to_string(local_ns)},
               {"attributes", json::array()}};
  set_default(span, semconv::kRank, int_attr(rank));
  set_default(span, "lens.clock.local_time_ns", int_attr(local_ns));
  set_default(span, "lens.clock.offset_ns", int_attr(offset_ns));
  set_default(span, "lens.clock.uncertainty_ns", int_attr(uncertainty_ns));
  set_default(span, "lens.clock.reference_rank", int_attr(0));
  set_default(span, "lens.clock.inferred_from_messages", int_attr(static_cast<std::int64_t>(messages)));
  return line_of({std::move(span)});
}

std::string UpstreamSteps::line_of(std::vector<json> spans) const {
  json list = json::array();
  for (auto& s : spans) list.push_back(std::move(s));
  const json request = {
      {"resourceSpans",
       json::array({{{"resource", resource_.is_null() ? json::object() : resource_},
                     {"scopeSpans", json::array({{{"scope", {{"name", "megatron"}}},
                                                  {"spans", std::move(list)}}})}}})}};
  return request.dump(-1, ' ', false, json::error_handler_t::replace);
}

MessageClocks clocks_from_messages(const std::vector<const UpstreamSteps*>& ranks) {
  MessageClocks out;
  // Rank 0's pipeline, by stage.
  std::map<int, const UpstreamSteps*> stages;
  const UpstreamSteps* zero = nullptr;
  for (const UpstreamSteps* r : ranks)
    if (r->rank() == 0) zero = r;
  if (zero == nullptr || zero->pipeline_source() < 0) {
    out.notes.push_back("clocks: rank 0's place is not known; every rank is read on its own clock");
    return out;
  }
  for (const UpstreamSteps* r : ranks)
    if (r->pipeline_source() == zero->pipeline_source()) stages[r->stage()] = r;
  out.clocks.push_back({0, 0, 0, 0, false});
  using Key = std::tuple<std::int64_t, std::int64_t>;  // step, microbatch
  const auto times = [](const UpstreamSteps& r, int kind) {
    std::map<Key, std::int64_t> by;
    for (const auto& t : r.transfers())
      if (t.kind == kind) by.emplace(Key{t.step, t.microbatch}, t.at_ns);
    return by;
  };
  constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::min();
  std::int64_t offset = 0, uncertainty = 0;
  for (auto it = stages.begin(); it != stages.end() && std::next(it) != stages.end(); ++it) {
    const UpstreamSteps& a = *it->second;
    const UpstreamSteps& b = *std::next(it)->second;
    if (b.stage() != a.stage() + 1) break;
    // d = offset(b) - offset(a): forward, a's send start - b's receive end
    // <= d; backward, d <= a's receive end - b's send start.
    std::int64_t lo = kNone, hi = std::numeric_limits<std::int64_t>::max();
    std::size_t n = 0;
    const auto sends_a = times(a, 1), receives_b = times(b, 0);
    for (const auto& [key, sent] : sends_a)
      if (auto r = receives_b.find(key); r != receives_b.end()) {
        lo = std::max(lo, sent - r->second);
        ++n;
      }
    const bool below = lo != kNone;
    const auto receives_a = times(a, 2), sends_b = times(b, 3);
    bool above = false;
    for (const auto& [key, received] : receives_a)
      if (auto sd = sends_b.find(key); sd != sends_b.end()) {
        hi = std::min(hi, received - sd->second);
        above = true;
        ++n;
      }
    if (!below || !above) {
      out.notes.push_back("clocks: no " + std::string(!below ? "forward" : "backward") +
                          " transfer between stage " + std::to_string(a.stage()) + " and " +
                          std::to_string(b.stage()) + " was traced at both ends, so rank " +
                          std::to_string(b.rank()) + " and the stages after it are read on "
                          "their own clocks");
      break;
    }
    MessageClock c{b.rank(), 0, 0, n, lo > hi};
    std::int64_t d = 0, u = 0;
    if (lo > hi) {  // the bounds crossed: the clocks moved during the run
      d = lo / 2 + hi / 2;
      u = (lo - hi) / 2;
    } else {
      d = std::clamp<std::int64_t>(0, lo, hi);
      u = std::max(d - lo, hi - d);
    }
    offset += d;
    uncertainty += u;
    c.offset_ns = offset;
    c.uncertainty_ns = uncertainty;
    out.clocks.push_back(c);
  }
  return out;
}

}  // namespace lens::analysis
