// Megatron's tensor parallelism inside one pipeline stage: each Linear of
// the stage's blocks split over the stage's TP group (the ranks of the same
// stage and replica), computing the same function as the whole Linear.
//
// - Column-parallel (even layers and the head): rank t holds output
//   features [t h/T, (t+1) h/T) of the weight and bias. Forward: identity
//   in, the local product, an all-gather of the T slices (Megatron's
//   ColumnParallelLinear with gather_output). Backward: the gathered
//   gradient's own slice, the local product, an all-reduce of the input's
//   gradient (copy_to_tensor_model_parallel_region).
// - Row-parallel (odd layers): rank t holds input features [t h/T, (t+1)
//   h/T) of the weight, and the whole bias. Forward: the input's own slice,
//   the local product, an all-reduce of the partial sums, then the bias
//   (RowParallelLinear, input not parallel). Backward: identity at the
//   all-reduce, an all-gather of the input's gradient slices.
//
// Everything between the layers (GELU, the residual, the loss) is
// replicated on every TP rank, so the TP ranks of a stage hold the same
// activations and each sends its copy to the same TP rank of the next
// stage. Each collective is a span (megatron.tp.all_reduce /
// megatron.tp.all_gather, communication group) with dl.tensor_parallel.rank
// and dl.collective.sequence, its index among the step's TP collectives on
// this rank: every TP peer calls them in the same order, so the same index
// is the same collective on every peer.
//
// Thread safety: not thread-safe; one per rank, used from the training
// thread (libtorch runs CPU backward on the calling thread).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "lens/tracer.h"
#include "work_wait.h"

namespace lens::train {

class TensorParallel {
 public:
  TensorParallel(c10::intrusive_ptr<c10d::ProcessGroup> group, int rank, int size,
                 std::chrono::milliseconds timeout, Tracer tracer);

  int rank() const { return rank_; }
  int size() const { return size_; }

  // A new step: collective sequence numbers restart at 0.
  void begin_step() { sequence_ = 0; }

  // Fault injection (--slow-rank on a TP rank, --slow-stage): the local
  // work between collectives takes `factor` times as long (a wait before
  // each collective and at pace()), from the time mark() was last called
  // or the last collective ended. 1: not slowed.
  void set_slow_factor(double factor) { slow_factor_ = factor; }
  void mark() { segment_start_ = std::chrono::steady_clock::now(); }
  void pace();

  // Called with what failed when a collective fails or times out (a lost
  // peer), before it throws: the trainer's failure record.
  void on_failure(FailureCallback callback) { on_failure_ = std::move(callback); }

  // The collectives, each a span; a failure or timeout throws.
  torch::Tensor all_reduce(torch::Tensor x);  // sums over the group
  torch::Tensor all_gather(torch::Tensor x);  // concatenates the last dim in TP rank order
  // This rank's slice of the last dimension.
  torch::Tensor own_slice(const torch::Tensor& x) const;

 private:
  Span collective_span(const char* name);
  // Waits for `work`; on a failure or timeout reports and throws.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* op);

  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  Tracer tracer_;
  std::int64_t sequence_ = 0;
  double slow_factor_ = 1;
  std::chrono::steady_clock::time_point segment_start_ = std::chrono::steady_clock::now();
  FailureCallback on_failure_;
};

// A Linear(in = out = hidden) split over `tp` (column- or row-parallel),
// with the weights a whole Linear made from the current torch seed would
// have, sliced.
class ParallelLinearImpl : public torch::nn::Module {
 public:
  enum class Split { kColumn, kRow };
  ParallelLinearImpl(int hidden, Split split, TensorParallel* tp);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  Split split_;
  TensorParallel* tp_;
  torch::Tensor weight_, bias_;
};
TORCH_MODULE(ParallelLinear);

}  // namespace lens::train
