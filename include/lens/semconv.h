// The names lens's spans and attributes go by: one definition that the
// writers (the step trace, telemetry, the trainer) and the readers (the
// analysis, the lens command) share, so a name is spelled once. Megatron-LM's
// own names (docs/megatron-traces.md) are kept where upstream spells them
// otherwise; the attributes of one feature that only its own file writes
// and reads (lens.clock.*, lens.tail.*) stay beside it.
//
// Thread safety: constants.
#pragma once

namespace lens::semconv {

// ---- span names -------------------------------------------------------------

inline constexpr const char* kJobSpan = "megatron.job";
inline constexpr const char* kStepSpan = "megatron.train_step";
inline constexpr const char* kForwardBackwardSpan = "megatron.forward_backward";
inline constexpr const char* kMicrobatchForwardSpan = "megatron.microbatch.forward";
inline constexpr const char* kMicrobatchBackwardSpan = "megatron.microbatch.backward";
// A receive linked to the step span of the stage that sent it.
inline constexpr const char* kLinkedReceiveSpan = "megatron.pp.recv_forward.linked";
inline constexpr const char* kGradsAllReduceSpan = "megatron.grads.all_reduce";
inline constexpr const char* kOptimizerStepSpan = "megatron.optimizer.step";
// Megatron-LM upstream's iteration (it says its number in kIteration), its
// forward-backward and its optimizer, as megatron/training/training.py opens
// them through nemo-lens (docs/megatron-traces.md). Every reader and the
// Python provider take them as lens's step, forward-backward and optimizer;
// LENS_STEP_SPAN names one more step span (kStepSpanSetting).
inline constexpr const char* kUpstreamStepSpan = "megatron.train.iteration";
inline constexpr const char* kUpstreamForwardBackwardSpan = "megatron.train.iteration.forward_backward";
inline constexpr const char* kUpstreamOptimizerSpan = "megatron.train.iteration.optimizer";
inline constexpr const char* kStepSpanSetting = "LENS_STEP_SPAN";
// A clock sample (clock_sync.h): one rank's offset against the reference's.
inline constexpr const char* kClockSyncSpan = "lens.clock_sync";
// A meeting of the ranks' tail selection (docs/tail-selection.md).
inline constexpr const char* kTailSelectionSpan = "lens.tail_selection";

// ---- attributes of a step's spans --------------------------------------------

inline constexpr const char* kStep = "dl.step";
inline constexpr const char* kMicrobatchId = "dl.microbatch_id";
// On a combined transfer (a send and a receive at once): each direction's.
inline constexpr const char* kMicrobatchIdSent = "dl.microbatch_id.sent";
inline constexpr const char* kMicrobatchIdReceived = "dl.microbatch_id.received";
// Upstream's iteration number, on its iteration span.
inline constexpr const char* kIteration = "megatron.iteration";
inline constexpr const char* kNumMicrobatches = "dl.num_microbatches";
inline constexpr const char* kVirtualPipelineRank = "dl.virtual_pipeline.rank";
inline constexpr const char* kPipelinePeerRank = "dl.pipeline_parallel.peer_rank";
// Spans ended by the signal that stopped the process carry its name.
inline constexpr const char* kStoppedBy = "lens.stopped_by";
inline constexpr const char* kTruncated = "nemo.span.truncated";
// A span from Python collected as garbage without an end: ended there,
// truncated, and said so (the collection's time is not its end).
inline constexpr const char* kEndedBy = "lens.ended_by";
inline constexpr const char* kEndedByCollection = "garbage collection";

// ---- attributes of the resource (and, where a span says them, of spans) -------

inline constexpr const char* kRank = "dl.rank";
inline constexpr const char* kWorldSize = "dl.world_size";
inline constexpr const char* kPipelineRank = "dl.pipeline_parallel.rank";
inline constexpr const char* kPipelineSize = "dl.pipeline_parallel.size";
inline constexpr const char* kVirtualPipelineSize = "dl.virtual_pipeline.size";
inline constexpr const char* kTensorRank = "dl.tensor_parallel.rank";
inline constexpr const char* kTensorSize = "dl.tensor_parallel.size";
inline constexpr const char* kDataRank = "dl.data_parallel.rank";
inline constexpr const char* kDataSize = "dl.data_parallel.size";
inline constexpr const char* kContextSize = "dl.context_parallel.size";
inline constexpr const char* kExpertSize = "dl.expert_parallel.size";
inline constexpr const char* kRunId = "nemo.run.id";
// Megatron's run id, one for every rank of the job (nemo.run.id is a random
// one a process where no run id is set).
inline constexpr const char* kRunUuid = "nemo.lens.run_uuid";
// What names a file's run, the first found: Megatron's, then NeMo's. The
// importer groups traces by it; check tells runs apart by it.
inline constexpr const char* kRunIdAttributes[2] = {kRunUuid, kRunId};
// nemo-lens's export strategy, on the resource where lens.otel took over from
// nemo-lens's provider (python/lens/otel.py writes it): lens check names it
// beside the ranks it left out.
inline constexpr const char* kNemoLensExportStrategy = "lens.nemo_lens.export_strategy";
// The GPUs a process saw: nemo-lens 0.1.0's resource detection writes
// host.gpu.count (resources/local.py); its documentation says dl.gpu.count.
inline constexpr const char* kGpuCountAttributes[2] = {"host.gpu.count", "dl.gpu.count"};
// A span timed on the device keeps its host times in these (span_timing.cc).
inline constexpr const char* kHostStart = "lens.host.start_unix_ns";
inline constexpr const char* kHostEnd = "lens.host.end_unix_ns";
// How the step context reached the rank: "broadcast" (or absent), "derived".
inline constexpr const char* kStepContext = "lens.step_context";
inline constexpr const char* kStepPrefetch = "lens.step_prefetch";
inline constexpr const char* kTraceScope = "lens.trace_scope";
inline constexpr const char* kExportFilter = "lens.export_filter";

}  // namespace lens::semconv
