// Megatron-LM's 1F1B schedules for one step of one pipeline replica,
// instrumented as the reference page says: the non-interleaved one
// (forward_backward_pipelining_without_interleaving) and the interleaved one
// (forward_backward_pipelining_with_interleaving, --virtual-stages V).
//
// Stage s of P with M microbatches runs min(P - s - 1, M) warmup forwards,
// then, if microbatches remain, the pre-1F1B recv_forward, the steady 1F1B
// phase (send_forward_recv_backward / send_backward_recv_forward) and the
// cooldown backwards. On non-first stages the warmup and pre-1F1B
// recv_forward are wrapped in megatron.pp.recv_forward.linked spans (via
// StepTrace); the steady-state and cooldown receives are not, so the span
// count per step does not grow with M.
//
// Interleaved: each rank holds V model chunks, chunk v of stage s being
// global chunk v * P + s of the P * V (the last stage's chunk v feeds the
// first stage's chunk v + 1). Forward unit k (of M * V) is microbatch
// (k / (P V)) P + k mod P of chunk (k / P) mod V; backward unit k the same
// microbatch of chunk V - 1 - (k / P) mod V. Stage s runs
// W = min((P - s - 1) * 2 + (V - 1) * P, M * V) warmup forwards (all M * V
// when M = P), then 1F1B pairs, then the cooldown backwards. M must be a
// multiple of P. Linked spans (non-first stages): every warmup forward
// receive and the pre-steady-state one, min(W, M V) + [M V > W] per step,
// each carrying the chunk it feeds (dl.virtual_pipeline.rank); with M >= the
// warmup's reach that count does not grow with M.
//
// Thread safety: runs on the training thread.
#pragma once

#include <chrono>

#include "lens/step_trace.h"
#include "p2p_communicator.h"
#include "simulated_device.h"
#include "stage_model.h"
#include "tensor_parallel.h"

namespace lens::train {

struct ScheduleContext {
  StageModel model{nullptr};  // chunk 0 (the stage's whole model when V = 1)
  const SyntheticData* data = nullptr;
  P2PCommunicator* p2p = nullptr;
  const StepTrace* step_trace = nullptr;
  Tracer tracer;
  int microbatches = 0;
  int replica = 0;  // data-parallel rank
  // Fault injection (--slow-stage, --slow-factor): this stage's forward and
  // backward take `slow_factor` times as long (the compute, then a wait of
  // (factor - 1) times what it took), from step `slow_from_step` on. 1:
  // not slowed.
  double slow_factor = 1;
  // Fault injection (--slow-ms): a fixed wait after each of its forwards
  // and backwards, whatever the compute took (a small model's passes are
  // too short for a factor to stand out of the run's noise). 0: none.
  double slow_delay_ms = 0;
  // Test aid (--test-compute-ms): each forward and backward lasts at least
  // this long, the rest of it a sleep, so that its time is what the test
  // says rather than what the machine's other processes leave it; the
  // factors above then apply to that time. 0: as it computes.
  double compute_floor_ms = 0;
  std::int64_t slow_from_step = 0;
  // Slow only at these steps (--slow-steps); empty: from slow_from_step on.
  std::vector<std::int64_t> slow_steps;
  // The interleaved schedule's chunks, V of them (chunks[0] is `model`);
  // empty for the non-interleaved schedule.
  std::vector<StageModel> chunks;
  // Work that varies by microbatch (--microbatch-jitter): each microbatch's
  // forward and backward take (factor - 1) times this rank's typical
  // compute longer, the factor in [1, microbatch_jitter] drawn from (seed,
  // step, replica, microbatch), so the same on every stage, as a long
  // sequence is. The wait follows the typical compute, not this one's, so
  // that the factor, not the machine's noise, sets the spread. 1: none.
  double microbatch_jitter = 1;
  std::uint64_t seed = 0;
  // Tensor parallelism over more than one rank: the slowdown is then paced
  // between the TP collectives (TensorParallel::pace), so a slow TP rank's
  // peers wait for it at each collective, as they would for a slow GPU.
  TensorParallel* tp = nullptr;
  // TEST AID (--test-simulated-device): the compute runs on a simulated GPU
  // and its spans are timed there (simulated_device.h). Null: on the host.
  SimulatedDevice* device = nullptr;

  // How a forward or backward span starts: on the device's stream, if any.
  StartOptions compute_span_options() const;

  // The factor of `microbatch` in `step`: 1 to microbatch_jitter.
  double jitter(std::int64_t step, int microbatch) const;
  // Whether the fault injection slows `step`.
  bool slowed(std::int64_t step) const;
  // A forward or backward of `step` begins: its start.
  std::chrono::steady_clock::time_point begin_compute(std::int64_t step);
  // A forward or backward of `step` that began at `start` has done its
  // work: it takes as long as the fault injection and the jitter say (a wait
  // after it), its work runs on the simulated device if there is one, its
  // span ends, and then the rank waits for the device (as a copy to the
  // host would).
  void end_compute(Span& span, std::chrono::steady_clock::time_point start, std::int64_t step,
                   int microbatch, bool backward);

  // Forward, backward: a moving average of this rank's computes (before any
  // wait), which the jitter's waits follow.
  double typical_ns[2] = {0, 0};
};

// Runs forward and backward for every microbatch of `step`, accumulating
// gradients (loss scaled by 1/M). Returns the mean loss on the last stage,
// NaN elsewhere.
double forward_backward_1f1b(ScheduleContext& ctx, std::int64_t step);

// The interleaved schedule (ctx.chunks holds V >= 2 chunks).
double forward_backward_interleaved(ScheduleContext& ctx, std::int64_t step);

// Number of linked spans one step opens on stage `stage` (0 on stage 0),
// with `virtual_stages` chunks per stage (1: the non-interleaved schedule).
int expected_linked_spans(int stages, int stage, int microbatches, int virtual_stages = 1);

// The interleaved schedule's warmup forwards on `stage`.
int interleaved_warmup(int stages, int stage, int microbatches, int virtual_stages);

}  // namespace lens::train
