#include "pipeline_schedule.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <thread>
#include <vector>

#include "lens/semconv.h"

namespace lens::train {
namespace {

struct InFlight {
  torch::Tensor input;   // what the stage received (requires grad), or undefined
  torch::Tensor output;  // the stage's output, or the loss on the last stage
};

class Stage {
 public:
  Stage(ScheduleContext& ctx, std::int64_t step) : ctx_(ctx), step_(step) {}

  torch::Tensor forward(torch::Tensor input, int microbatch) {
    Span span = ctx_.tracer.start_span(SpanGroup::kMicrobatch, semconv::kMicrobatchForwardSpan,
                                       ctx_.compute_span_options());
    span.set_attribute(semconv::kMicrobatchId, microbatch);
    const auto start = ctx_.begin_compute(step_);
    if (ctx_.p2p->first_stage()) {
      input = ctx_.data->input(step_, microbatch, ctx_.replica);
    } else {
      input.requires_grad_(true);
    }
    torch::Tensor output = ctx_.model->forward(input);
    if (ctx_.p2p->last_stage()) {
      torch::Tensor loss =
          torch::mse_loss(output, ctx_.data->target(step_, microbatch, ctx_.replica)) /
          ctx_.microbatches;
      loss_sum_ += loss.item<double>() * ctx_.microbatches;
      output = loss;
    }
    in_flight_.push_back({input, output});
    ctx_.end_compute(span, start, step_, microbatch, false);
    return output;
  }

  torch::Tensor backward(const torch::Tensor& output_grad, int microbatch) {
    Span span = ctx_.tracer.start_span(SpanGroup::kMicrobatch, semconv::kMicrobatchBackwardSpan,
                                       ctx_.compute_span_options());
    span.set_attribute(semconv::kMicrobatchId, microbatch);
    const auto start = ctx_.begin_compute(step_);
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    if (ctx_.p2p->last_stage()) {
      f.output.backward();
    } else {
      f.output.backward(output_grad);
    }
    ctx_.end_compute(span, start, step_, microbatch, true);
    return ctx_.p2p->first_stage() ? torch::Tensor() : f.input.grad();
  }

  double mean_loss() const {
    return ctx_.p2p->last_stage() ? loss_sum_ / ctx_.microbatches
                                  : std::numeric_limits<double>::quiet_NaN();
  }

 private:
  ScheduleContext& ctx_;
  std::int64_t step_;
  std::deque<InFlight> in_flight_;
  double loss_sum_ = 0;
};

}  // namespace

double ScheduleContext::jitter(std::int64_t step, int microbatch) const {
  if (microbatch_jitter <= 1) return 1;
  // splitmix64 over the four: a uniform draw in [0, 1).
  std::uint64_t x = seed ^ (static_cast<std::uint64_t>(step) * 0x9E3779B97F4A7C15ULL) ^
                    (static_cast<std::uint64_t>(replica) << 40) ^
                    static_cast<std::uint64_t>(microbatch);
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  x ^= x >> 31;
  const double u = static_cast<double>(x >> 11) * 0x1.0p-53;
  return 1 + (microbatch_jitter - 1) * u;
}

bool ScheduleContext::slowed(std::int64_t step) const {
  if (slow_factor <= 1 && slow_delay_ms <= 0) return false;
  if (!slow_steps.empty())
    return std::find(slow_steps.begin(), slow_steps.end(), step) != slow_steps.end();
  return step >= slow_from_step;
}

std::chrono::steady_clock::time_point ScheduleContext::begin_compute(std::int64_t step) {
  if (tp != nullptr) {
    tp->set_slow_factor(slowed(step) ? slow_factor : 1);
    tp->mark();
  }
  return std::chrono::steady_clock::now();
}

void ScheduleContext::end_compute(Span& span, std::chrono::steady_clock::time_point start,
                                  std::int64_t step, int microbatch, bool backward) {
  // With tensor parallelism: the last stretch of local work since the last
  // collective.
  if (tp != nullptr) tp->pace();
  const double computed = static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
  // The test aid's floor: what the pass lasts, the rest of it waited below.
  const double took = std::max(computed, compute_floor_ms * 1e6);
  double& typical = typical_ns[backward ? 1 : 0];
  typical = typical == 0 ? took : 0.8 * typical + 0.2 * took;
  double wait = took - computed;
  if (slowed(step)) {
    if (tp == nullptr) wait += (slow_factor - 1) * took;
    wait += slow_delay_ms * 1e6;
  }
  wait += (jitter(step, microbatch) - 1) * typical;
  if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(std::llround(wait)));
  if (device != nullptr) device->launch(start);
  span.end();
  if (device != nullptr) device->wait();
}

StartOptions ScheduleContext::compute_span_options() const {
  StartOptions o;
  if (device != nullptr) o.device_stream = device->stream();
  return o;
}

int interleaved_warmup(int stages, int stage, int microbatches, int virtual_stages) {
  const int total = microbatches * virtual_stages;
  if (microbatches == stages) return total;  // Megatron: all warmup
  return std::min((stages - stage - 1) * 2 + (virtual_stages - 1) * stages, total);
}

int expected_linked_spans(int stages, int stage, int microbatches, int virtual_stages) {
  if (stage == 0) return 0;
  if (virtual_stages > 1) {
    const int total = microbatches * virtual_stages;
    const int warmup = interleaved_warmup(stages, stage, microbatches, virtual_stages);
    return warmup + (total > warmup ? 1 : 0);
  }
  const int warmup = std::min(stages - stage - 1, microbatches);
  return warmup + (microbatches > warmup ? 1 : 0);
}

double forward_backward_1f1b(ScheduleContext& ctx, std::int64_t step) {
  P2PCommunicator& p2p = *ctx.p2p;
  Stage stage(ctx, step);
  const int M = ctx.microbatches;
  // Warmup: P - s - 1 forwards (at most M) before the first backward.
  const int warmup = std::min(p2p.stages() - p2p.stage() - 1, M);
  const int remaining = M - warmup;
  int forward_mb = 0;
  int backward_mb = 0;

  for (int i = 0; i < warmup; ++i) {
    torch::Tensor input;
    {
      Span linked = ctx.step_trace->recv_forward_linked(forward_mb);
      input = p2p.recv_forward(forward_mb);
    }
    torch::Tensor output = stage.forward(input, forward_mb++);
    p2p.send_forward(output, forward_mb - 1);
  }

  torch::Tensor input;
  if (remaining > 0) {
    // The pre-1F1B receive: the last one linked.
    Span linked = ctx.step_trace->recv_forward_linked(forward_mb);
    input = p2p.recv_forward(forward_mb);
  }

  for (int i = 0; i < remaining; ++i) {
    const bool last_iteration = i == remaining - 1;
    torch::Tensor output = stage.forward(input, forward_mb++);
    torch::Tensor output_grad = p2p.send_forward_recv_backward(output, forward_mb - 1, backward_mb);
    torch::Tensor input_grad = stage.backward(output_grad, backward_mb++);
    if (last_iteration) {
      input = torch::Tensor();
      p2p.send_backward(input_grad, backward_mb - 1);
    } else {
      input = p2p.send_backward_recv_forward(input_grad, backward_mb - 1, forward_mb);
    }
  }

  for (int i = 0; i < warmup; ++i) {
    torch::Tensor output_grad = p2p.recv_backward(backward_mb);
    torch::Tensor input_grad = stage.backward(output_grad, backward_mb++);
    p2p.send_backward(input_grad, backward_mb - 1);
  }
  return stage.mean_loss();
}

namespace {

// One stage's V chunks in the interleaved schedule: each chunk's forward and
// backward, its in-flight microbatches (FIFO: both directions visit a
// chunk's microbatches in order) and where its data comes from and goes.
class Chunks {
 public:
  Chunks(ScheduleContext& ctx, std::int64_t step)
      : ctx_(ctx),
        step_(step),
        stages_(ctx.p2p->stages()),
        stage_(ctx.p2p->stage()),
        v_(static_cast<int>(ctx.chunks.size())),
        in_flight_(ctx.chunks.size()) {}

  bool first_chunk(int v) const { return stage_ == 0 && v == 0; }
  bool last_chunk(int v) const { return stage_ == stages_ - 1 && v == v_ - 1; }
  // The stage a chunk's input comes from (forward) and its gradient goes to.
  int previous_stage() const { return (stage_ + stages_ - 1) % stages_; }
  int next_stage() const { return (stage_ + 1) % stages_; }

  torch::Tensor receive_input(int v, int microbatch) {
    if (first_chunk(v)) return {};
    return ctx_.p2p->recv_chunk(true, previous_stage(), microbatch, v);
  }

  void forward(int v, int microbatch, torch::Tensor input) {
    Span span = ctx_.tracer.start_span(SpanGroup::kMicrobatch, semconv::kMicrobatchForwardSpan,
                                       ctx_.compute_span_options());
    span.set_attribute(semconv::kMicrobatchId, microbatch);
    span.set_attribute(semconv::kVirtualPipelineRank, std::int64_t{v});
    const auto start = ctx_.begin_compute(step_);
    if (first_chunk(v))
      input = ctx_.data->input(step_, microbatch, ctx_.replica);
    else
      input.requires_grad_(true);
    torch::Tensor output = ctx_.chunks[static_cast<std::size_t>(v)]->forward(input);
    if (last_chunk(v)) {
      torch::Tensor loss =
          torch::mse_loss(output, ctx_.data->target(step_, microbatch, ctx_.replica)) /
          ctx_.microbatches;
      loss_sum_ += loss.item<double>() * ctx_.microbatches;
      output = loss;
    }
    in_flight_[static_cast<std::size_t>(v)].push_back({input, output});
    ctx_.end_compute(span, start, step_, microbatch, false);
    if (!last_chunk(v)) ctx_.p2p->send_chunk(true, output, next_stage(), microbatch, v);
  }

  void backward(int v, int microbatch) {
    torch::Tensor output_grad;
    if (!last_chunk(v)) output_grad = ctx_.p2p->recv_chunk(false, next_stage(), microbatch, v);
    Span span = ctx_.tracer.start_span(SpanGroup::kMicrobatch, semconv::kMicrobatchBackwardSpan,
                                       ctx_.compute_span_options());
    span.set_attribute(semconv::kMicrobatchId, microbatch);
    span.set_attribute(semconv::kVirtualPipelineRank, std::int64_t{v});
    const auto start = ctx_.begin_compute(step_);
    auto& queue = in_flight_[static_cast<std::size_t>(v)];
    InFlight f = std::move(queue.front());
    queue.pop_front();
    if (last_chunk(v))
      f.output.backward();
    else
      f.output.backward(output_grad);
    ctx_.end_compute(span, start, step_, microbatch, true);
    if (!first_chunk(v))
      ctx_.p2p->send_chunk(false, f.input.grad(), previous_stage(), microbatch, v);
  }

  double mean_loss() const {
    return stage_ == stages_ - 1 ? loss_sum_ / ctx_.microbatches
                                 : std::numeric_limits<double>::quiet_NaN();
  }

 private:
  ScheduleContext& ctx_;
  std::int64_t step_;
  int stages_, stage_, v_;
  std::vector<std::deque<InFlight>> in_flight_;
  double loss_sum_ = 0;
};

}  // namespace

double forward_backward_interleaved(ScheduleContext& ctx, std::int64_t step) {
  P2PCommunicator& p2p = *ctx.p2p;
  Chunks chunks(ctx, step);
  const int P = p2p.stages(), s = p2p.stage(), M = ctx.microbatches;
  const int V = static_cast<int>(ctx.chunks.size());
  const int total = M * V;
  const int warmup = interleaved_warmup(P, s, M, V);
  const int remaining = total - warmup;
  const auto microbatch_of = [&](int k) { return (k / (P * V)) * P + k % P; };
  const auto forward_chunk = [&](int k) { return (k / P) % V; };
  const auto backward_chunk = [&](int k) { return V - 1 - (k / P) % V; };
  // A warmup (or the pre-steady-state) receive, linked on non-first stages.
  const auto linked_receive = [&](int k) {
    Span linked = ctx.step_trace->recv_forward_linked(microbatch_of(k));
    linked.set_attribute(semconv::kVirtualPipelineRank, std::int64_t{forward_chunk(k)});
    return chunks.receive_input(forward_chunk(k), microbatch_of(k));
  };

  for (int k = 0; k < warmup; ++k)
    chunks.forward(forward_chunk(k), microbatch_of(k), linked_receive(k));
  torch::Tensor input;
  if (remaining > 0) input = linked_receive(warmup);
  for (int i = 0; i < remaining; ++i) {
    const int k = warmup + i;
    chunks.forward(forward_chunk(k), microbatch_of(k), input);
    chunks.backward(backward_chunk(i), microbatch_of(i));
    if (i < remaining - 1) input = chunks.receive_input(forward_chunk(k + 1), microbatch_of(k + 1));
  }
  for (int i = remaining; i < total; ++i) chunks.backward(backward_chunk(i), microbatch_of(i));
  p2p.finish_sends();
  return chunks.mean_loss();
}

}  // namespace lens::train
