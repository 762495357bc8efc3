// Point-to-point transfers between neighbouring pipeline stages over a c10d
// process group (ProcessGroupGloo send/recv), with Megatron's operation
// names. Operations that have nothing to do on the first or last stage are
// no-ops there (recv_forward on the first stage returns an undefined tensor).
// Combined operations post the send and the receive together and wait for
// both, so neighbours exchanging in opposite directions never deadlock.
//
// Each transfer that happens is traced as megatron.p2p.<operation> in the
// `communication` group. Failures and timeouts throw, naming the operation
// and the peer stage.
//
// Thread safety: one per rank, used by the training thread.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "lens/tracer.h"
#include "work_wait.h"

namespace lens::train {

class P2PCommunicator {
 public:
  P2PCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> pp_group, int stage, int stages,
                  std::vector<std::int64_t> activation_shape, std::chrono::milliseconds timeout,
                  Tracer tracer);

  // Each transfer's span says what it carries (docs/analysis.md): the
  // microbatch sent (dl.microbatch_id.sent) and/or received
  // (dl.microbatch_id.received; dl.microbatch_id for a one-way transfer),
  // the direction of the data (dl.p2p.direction: forward, backward, or
  // forward,backward for a combined one, what it sends first) and the peer
  // stage (dl.pipeline_parallel.peer_rank).
  torch::Tensor recv_forward(int microbatch);
  void send_forward(const torch::Tensor& output, int microbatch);
  torch::Tensor recv_backward(int microbatch);
  void send_backward(const torch::Tensor& input_grad, int microbatch);
  torch::Tensor send_forward_recv_backward(const torch::Tensor& output, int sent, int received);
  torch::Tensor send_backward_recv_forward(const torch::Tensor& input_grad, int sent, int received);

  // The interleaved schedule's transfers (pipeline_schedule.h): a model
  // chunk's activations (forward) and gradients (backward) go to or come
  // from any stage, since the last stage's chunk v feeds the first stage's
  // chunk v + 1. Receives block; sends are only posted, and finish_sends()
  // waits for them at the end of the step, so no stage ever waits on a
  // neighbour's send. Traced as the transfers above, with
  // dl.virtual_pipeline.rank, the chunk on this side.
  torch::Tensor recv_chunk(bool forward, int peer, int microbatch, int chunk);
  void send_chunk(bool forward, const torch::Tensor& t, int peer, int microbatch, int chunk);
  void finish_sends();

  int stage() const { return stage_; }
  int stages() const { return stages_; }
  bool first_stage() const { return stage_ == 0; }
  // Called with the error text when a transfer fails, before it is thrown,
  // while the spans around the transfer are still open.
  void on_failure(FailureCallback callback) { on_failure_ = std::move(callback); }
  bool last_stage() const { return stage_ == stages_ - 1; }

 private:
  c10::intrusive_ptr<c10d::Work> post_send(const torch::Tensor& t, int peer, int tag);
  c10::intrusive_ptr<c10d::Work> post_recv(torch::Tensor& t, int peer, int tag);
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* op, int peer);

  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  int stage_;
  int stages_;
  std::vector<std::int64_t> shape_;
  std::chrono::milliseconds timeout_;
  Tracer tracer_;
  std::vector<torch::Tensor> keep_alive_;  // send buffers until their work completes
  struct PostedSend {
    c10::intrusive_ptr<c10d::Work> work;
    const char* op;
    int peer;
  };
  std::vector<PostedSend> posted_;  // the interleaved schedule's, until finish_sends()
  FailureCallback on_failure_;
};

}  // namespace lens::train
