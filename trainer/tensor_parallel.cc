#include "tensor_parallel.h"

#include <thread>

#include "lens/semconv.h"

namespace lens::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group travels through autograd's context as an integer (saved_data
// holds IValues); it outlives every graph built in a step.
void keep(AutogradContext* ctx, TensorParallel* tp) {
  ctx->saved_data["tp"] = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(tp));
}
TensorParallel* group_of(AutogradContext* ctx) {
  return reinterpret_cast<TensorParallel*>(
      static_cast<std::intptr_t>(ctx->saved_data["tp"].toInt()));
}

// Forward: the input as it is; backward: the gradients of every TP rank's
// use of it, summed.
struct CopyToGroup : torch::autograd::Function<CopyToGroup> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, TensorParallel* tp) {
    keep(ctx, tp);
    return x.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {group_of(ctx)->all_reduce(grads[0]), torch::Tensor()};
  }
};

// Forward: every rank's slice, concatenated; backward: this rank's slice of
// the gradient.
struct GatherFromGroup : torch::autograd::Function<GatherFromGroup> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, TensorParallel* tp) {
    keep(ctx, tp);
    return tp->all_gather(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {group_of(ctx)->own_slice(grads[0]), torch::Tensor()};
  }
};

// Forward: this rank's slice; backward: every rank's gradient slice,
// concatenated.
struct ScatterToGroup : torch::autograd::Function<ScatterToGroup> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, TensorParallel* tp) {
    keep(ctx, tp);
    return tp->own_slice(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {group_of(ctx)->all_gather(grads[0]), torch::Tensor()};
  }
};

// Forward: the partial sums of every rank, summed; backward: the gradient
// as it is (every rank's partial sum fed the same output).
struct ReduceFromGroup : torch::autograd::Function<ReduceFromGroup> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, TensorParallel* tp) {
    keep(ctx, tp);
    return tp->all_reduce(x);
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], torch::Tensor()};
  }
};

}  // namespace

TensorParallel::TensorParallel(c10::intrusive_ptr<c10d::ProcessGroup> group, int rank, int size,
                               std::chrono::milliseconds timeout, Tracer tracer)
    : group_(std::move(group)), rank_(rank), size_(size), timeout_(timeout), tracer_(tracer) {}

void TensorParallel::pace() {
  if (slow_factor_ > 1) {
    const auto took = std::chrono::steady_clock::now() - segment_start_;
    std::this_thread::sleep_for(
        std::chrono::duration_cast<std::chrono::nanoseconds>(took * (slow_factor_ - 1)));
  }
  mark();
}

Span TensorParallel::collective_span(const char* name) {
  Span span = tracer_.start_span(SpanGroup::kCommunication, name);
  span.set_attribute(semconv::kTensorRank, std::int64_t{rank_});
  span.set_attribute(semconv::kTensorSize, std::int64_t{size_});
  span.set_attribute("dl.collective.sequence", sequence_++);
  return span;
}

void TensorParallel::wait(const c10::intrusive_ptr<c10d::Work>& work, const char* op) {
  wait_or_fail(
      work, timeout_,
      [&] {
        return std::string("tensor-parallel ") + op + " (collective " +
               std::to_string(sequence_ - 1) + " of the step) failed on TP rank " +
               std::to_string(rank_) + " of " + std::to_string(size_);
      },
      on_failure_);
}

torch::Tensor TensorParallel::all_reduce(torch::Tensor x) {
  pace();
  Span span = collective_span("megatron.tp.all_reduce");
  // A copy of its own (the reduction is in place), contiguous: one copy.
  std::vector<torch::Tensor> io{x.detach().clone(at::MemoryFormat::Contiguous)};
  wait(group_->allreduce(io), "all-reduce");
  mark();
  return io[0];
}

torch::Tensor TensorParallel::all_gather(torch::Tensor x) {
  pace();
  Span span = collective_span("megatron.tp.all_gather");
  std::vector<torch::Tensor> input{x.detach().contiguous()};
  std::vector<std::vector<torch::Tensor>> output(1);
  for (int r = 0; r < size_; ++r) output[0].push_back(torch::empty_like(input[0]));
  wait(group_->allgather(output, input), "all-gather");
  mark();
  return torch::cat(output[0], -1);
}

torch::Tensor TensorParallel::own_slice(const torch::Tensor& x) const {
  const std::int64_t width = x.size(-1) / size_;
  return x.narrow(-1, rank_ * width, width).contiguous();
}

ParallelLinearImpl::ParallelLinearImpl(int hidden, Split split, TensorParallel* tp)
    : split_(split), tp_(tp) {
  // The whole layer, as torch::nn::Linear makes it from the current seed;
  // this rank keeps its part.
  torch::nn::Linear whole(hidden, hidden);
  const std::int64_t width = hidden / tp->size();
  const std::int64_t from = tp->rank() * width;
  torch::NoGradGuard no_grad;
  if (split == Split::kColumn) {
    weight_ = whole->weight.narrow(0, from, width).clone();
    bias_ = whole->bias.narrow(0, from, width).clone();
  } else {
    weight_ = whole->weight.narrow(1, from, width).clone();
    bias_ = whole->bias.clone();
  }
  weight_ = register_parameter("weight", weight_);
  bias_ = register_parameter("bias", bias_);
}

torch::Tensor ParallelLinearImpl::forward(const torch::Tensor& x) {
  if (split_ == Split::kColumn) {
    torch::Tensor local = torch::nn::functional::linear(CopyToGroup::apply(x, tp_), weight_, bias_);
    return GatherFromGroup::apply(local, tp_);
  }
  torch::Tensor partial = torch::nn::functional::linear(ScatterToGroup::apply(x, tp_), weight_);
  return ReduceFromGroup::apply(partial, tp_) + bias_;
}

}  // namespace lens::train
