// Megatron-LM's non-interleaved 1F1B schedule
// (forward_backward_pipelining_without_interleaving) for one step of one
// pipeline replica, instrumented as the reference page says.
//
// Stage s of P with M microbatches runs min(P - s - 1, M) warmup forwards,
// then, if microbatches remain, the pre-1F1B recv_forward, the steady 1F1B
// phase (send_forward_recv_backward / send_backward_recv_forward) and the
// cooldown backwards. On non-first stages the warmup and pre-1F1B
// recv_forward are wrapped in megatron.pp.recv_forward.linked spans (via
// StepTrace); the steady-state and cooldown receives are not, so the span
// count per step does not grow with M.
//
// Thread safety: runs on the training thread.
#pragma once

#include "lens/step_trace.h"
#include "p2p_communicator.h"
#include "stage_model.h"

namespace lens::train {

struct ScheduleContext {
  StageModel model;
  const SyntheticData* data;
  P2PCommunicator* p2p;
  const StepTrace* step_trace;
  Tracer tracer;
  int microbatches;
  int replica;  // data-parallel rank
  // Fault injection (--slow-stage, --slow-factor): this stage's forward and
  // backward take `slow_factor` times as long (the compute, then a wait of
  // (factor - 1) times what it took). 1: not slowed.
  double slow_factor = 1;
};

// Runs forward and backward for every microbatch of `step`, accumulating
// gradients (loss scaled by 1/M). Returns the mean loss on the last stage,
// NaN elsewhere.
double forward_backward_1f1b(ScheduleContext& ctx, std::int64_t step);

// Number of linked spans one step opens on stage `stage` (0 on stage 0).
int expected_linked_spans(int stages, int stage, int microbatches);

}  // namespace lens::train
