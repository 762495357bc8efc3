#include "p2p_communicator.h"

#include "lens/semconv.h"

namespace lens::train {
namespace {

constexpr int kForwardTag = 0;   // activations, stage s -> s+1
constexpr int kBackwardTag = 1;  // gradients, stage s+1 -> s

// What a transfer span carries (p2p_communicator.h).
void describe(Span& span, const char* direction, int peer, int sent, int received) {
  if (!span.recording()) return;
  span.set_attribute("dl.p2p.direction", direction);
  span.set_attribute(semconv::kPipelinePeerRank, std::int64_t{peer});
  if (sent >= 0) span.set_attribute(semconv::kMicrobatchIdSent, std::int64_t{sent});
  if (received >= 0) span.set_attribute(semconv::kMicrobatchIdReceived, std::int64_t{received});
  if ((sent >= 0) != (received >= 0))
    span.set_attribute(semconv::kMicrobatchId, std::int64_t{sent >= 0 ? sent : received});
}

}  // namespace

P2PCommunicator::P2PCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> pp_group, int stage,
                                 int stages, std::vector<std::int64_t> activation_shape,
                                 std::chrono::milliseconds timeout, Tracer tracer)
    : group_(std::move(pp_group)),
      stage_(stage),
      stages_(stages),
      shape_(std::move(activation_shape)),
      timeout_(timeout),
      tracer_(tracer) {}

c10::intrusive_ptr<c10d::Work> P2PCommunicator::post_send(const torch::Tensor& t, int peer,
                                                          int tag) {
  std::vector<torch::Tensor> tensors{t.detach().contiguous()};
  keep_alive_.push_back(tensors[0]);
  return group_->send(tensors, peer, tag);
}

c10::intrusive_ptr<c10d::Work> P2PCommunicator::post_recv(torch::Tensor& t, int peer, int tag) {
  t = torch::empty(shape_, torch::kFloat32);
  std::vector<torch::Tensor> tensors{t};
  return group_->recv(tensors, peer, tag);
}

void P2PCommunicator::wait(const c10::intrusive_ptr<c10d::Work>& work, const char* op, int peer) {
  wait_or_fail(
      work, timeout_,
      [&] {
        return std::string(op) + " with pipeline stage " + std::to_string(peer) +
               " failed on stage " + std::to_string(stage_);
      },
      on_failure_);
}

torch::Tensor P2PCommunicator::recv_forward(int microbatch) {
  if (first_stage()) return {};
  Span span = tracer_.start_span(SpanGroup::kCommunication, "megatron.p2p.recv_forward",
                                 StepFigure::kP2pWait);
  describe(span, "forward", stage_ - 1, -1, microbatch);
  torch::Tensor t;
  auto work = post_recv(t, stage_ - 1, kForwardTag);
  wait(work, "recv_forward", stage_ - 1);
  return t;
}

void P2PCommunicator::send_forward(const torch::Tensor& output, int microbatch) {
  if (last_stage()) return;
  Span span = tracer_.start_span(SpanGroup::kCommunication, "megatron.p2p.send_forward",
                                 StepFigure::kP2pSend);
  describe(span, "forward", stage_ + 1, microbatch, -1);
  auto work = post_send(output, stage_ + 1, kForwardTag);
  wait(work, "send_forward", stage_ + 1);
  keep_alive_.clear();
}

torch::Tensor P2PCommunicator::recv_backward(int microbatch) {
  if (last_stage()) return {};
  Span span = tracer_.start_span(SpanGroup::kCommunication, "megatron.p2p.recv_backward",
                                 StepFigure::kP2pWait);
  describe(span, "backward", stage_ + 1, -1, microbatch);
  torch::Tensor t;
  auto work = post_recv(t, stage_ + 1, kBackwardTag);
  wait(work, "recv_backward", stage_ + 1);
  return t;
}

void P2PCommunicator::send_backward(const torch::Tensor& input_grad, int microbatch) {
  if (first_stage()) return;
  Span span = tracer_.start_span(SpanGroup::kCommunication, "megatron.p2p.send_backward",
                                 StepFigure::kP2pSend);
  describe(span, "backward", stage_ - 1, microbatch, -1);
  auto work = post_send(input_grad, stage_ - 1, kBackwardTag);
  wait(work, "send_backward", stage_ - 1);
  keep_alive_.clear();
}

torch::Tensor P2PCommunicator::send_forward_recv_backward(const torch::Tensor& output,
                                                          int sent_microbatch,
                                                          int received_microbatch) {
  if (last_stage()) return {};
  Span span = tracer_.start_span(SpanGroup::kCommunication,
                                 "megatron.p2p.send_forward_recv_backward", StepFigure::kP2pWait);
  describe(span, "forward,backward", stage_ + 1, sent_microbatch, received_microbatch);
  torch::Tensor grad;
  auto sent = post_send(output, stage_ + 1, kForwardTag);
  auto received = post_recv(grad, stage_ + 1, kBackwardTag);
  wait(sent, "send_forward", stage_ + 1);
  wait(received, "recv_backward", stage_ + 1);
  keep_alive_.clear();
  return grad;
}

torch::Tensor P2PCommunicator::send_backward_recv_forward(const torch::Tensor& input_grad,
                                                          int sent_microbatch,
                                                          int received_microbatch) {
  if (first_stage()) return {};
  Span span = tracer_.start_span(SpanGroup::kCommunication,
                                 "megatron.p2p.send_backward_recv_forward", StepFigure::kP2pWait);
  describe(span, "backward,forward", stage_ - 1, sent_microbatch, received_microbatch);
  torch::Tensor input;
  auto sent = post_send(input_grad, stage_ - 1, kBackwardTag);
  auto received = post_recv(input, stage_ - 1, kForwardTag);
  wait(sent, "send_backward", stage_ - 1);
  wait(received, "recv_forward", stage_ - 1);
  keep_alive_.clear();
  return input;
}

torch::Tensor P2PCommunicator::recv_chunk(bool forward, int peer, int microbatch, int chunk) {
  Span span = tracer_.start_span(
      SpanGroup::kCommunication,
      forward ? "megatron.p2p.recv_forward" : "megatron.p2p.recv_backward", StepFigure::kP2pWait);
  describe(span, forward ? "forward" : "backward", peer, -1, microbatch);
  span.set_attribute(semconv::kVirtualPipelineRank, std::int64_t{chunk});
  torch::Tensor t;
  auto work = post_recv(t, peer, forward ? kForwardTag : kBackwardTag);
  wait(work, forward ? "recv_forward" : "recv_backward", peer);
  return t;
}

void P2PCommunicator::send_chunk(bool forward, const torch::Tensor& t, int peer, int microbatch,
                                 int chunk) {
  Span span = tracer_.start_span(
      SpanGroup::kCommunication,
      forward ? "megatron.p2p.send_forward" : "megatron.p2p.send_backward", StepFigure::kP2pSend);
  describe(span, forward ? "forward" : "backward", peer, microbatch, -1);
  span.set_attribute(semconv::kVirtualPipelineRank, std::int64_t{chunk});
  posted_.push_back({post_send(t, peer, forward ? kForwardTag : kBackwardTag),
                     forward ? "send_forward" : "send_backward", peer});
}

void P2PCommunicator::finish_sends() {
  for (const auto& p : posted_) wait(p.work, p.op, p.peer);
  posted_.clear();
  keep_alive_.clear();
}

}  // namespace lens::train
