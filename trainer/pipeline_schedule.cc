#include "pipeline_schedule.h"

#include <chrono>
#include <deque>
#include <limits>
#include <thread>

namespace lens::train {
namespace {

// Makes a compute that took since `start` take `factor` times as long.
void stretch(std::chrono::steady_clock::time_point start, double factor) {
  if (factor <= 1) return;
  const auto took = std::chrono::steady_clock::now() - start;
  std::this_thread::sleep_for(
      std::chrono::duration_cast<std::chrono::nanoseconds>(took * (factor - 1)));
}

struct InFlight {
  torch::Tensor input;   // what the stage received (requires grad), or undefined
  torch::Tensor output;  // the stage's output, or the loss on the last stage
};

class Stage {
 public:
  Stage(ScheduleContext& ctx, std::int64_t step) : ctx_(ctx), step_(step) {}

  torch::Tensor forward(torch::Tensor input, int microbatch) {
    Span span = ctx_.tracer.start_span(SpanGroup::kMicrobatch, "megatron.microbatch.forward");
    span.set_attribute("dl.microbatch_id", microbatch);
    const auto start = std::chrono::steady_clock::now();
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
    stretch(start, ctx_.slow_factor);
    return output;
  }

  torch::Tensor backward(const torch::Tensor& output_grad, int microbatch) {
    Span span = ctx_.tracer.start_span(SpanGroup::kMicrobatch, "megatron.microbatch.backward");
    span.set_attribute("dl.microbatch_id", microbatch);
    const auto start = std::chrono::steady_clock::now();
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    if (ctx_.p2p->last_stage()) {
      f.output.backward();
    } else {
      f.output.backward(output_grad);
    }
    stretch(start, ctx_.slow_factor);
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

int expected_linked_spans(int stages, int stage, int microbatches) {
  if (stage == 0) return 0;
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

}  // namespace lens::train
