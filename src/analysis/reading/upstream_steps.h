// Megatron-LM's own traces, correlated after the fact (docs/megatron-traces.md).
//
// Upstream Megatron-LM traces each rank's iteration in a trace of its own:
// `megatron.train.iteration` (attribute `megatron.iteration`) >
// `megatron.train.iteration.forward_backward` > `megatron.microbatch.forward` /
// `.backward` and `megatron.p2p.{recv,send}_{forward,backward}`, with no
// attributes on the microbatch and p2p spans, and the layout in the resource
// (`dl.rank`, `dl.world_size`, `dl.*_parallel.size`). UpstreamSteps takes one
// rank's spans, in the order they ended, and writes them in lens's layout
// with what lens's readers need, inferred and marked so:
//  - the rank's place from the resource (lens/rank_order.h, Megatron's
//    default order unless LENS_RANK_ORDER names another) as
//    dl.{pipeline,data,tensor}_parallel.rank on the resource;
//  - the step: `megatron.iteration` as dl.step on the step span (else the
//    steps counted), with dl.rank and dl.pipeline_parallel.rank;
//  - microbatch ids by start order within the step (1F1B runs forwards and
//    backwards in microbatch order), and on each p2p span its direction,
//    peer stage and the microbatch of the compute it feeds or follows;
//    the transfers the schedule makes but the trace lacks (upstream's
//    untraced combined calls) counted;
//  - the resource says `lens.inferred` (what was inferred), which every
//    view reports; a step's ranks are then matched by step number, not by a
//    shared trace.
// One step's spans are held until its step span ends; spans of no step are
// written at the end.
//
// Thread safety: one object per rank, on one thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "run_reader.h"

namespace lens::analysis {

// The resource attribute every view reads to say the run's correlation is
// inferred, and its value.
inline constexpr const char* kInferredAttribute = "lens.inferred";
inline constexpr const char* kInferredWhat =
    "Megatron-LM upstream traces: ranks from dl.rank and the parallel sizes, steps by "
    "megatron.iteration, microbatches and transfers by order";

// Whether a step span (pipeline_view.h's names) without dl.step: a rank
// whose spans include one is upstream Megatron-LM's.
bool is_upstream_step_span(const nlohmann::json& span);
bool is_upstream_step_span(const SpanRow& span);

// What a run's correlation inferred, from its files' resources ("" when
// nothing was: every figure is as its spans say).
std::string inferred_of(const std::vector<RankFile>& files);

class UpstreamSteps {
 public:
  // The rank order (LENS_RANK_ORDER, else Megatron's default).
  explicit UpstreamSteps(std::string rank_order);

  // One OTLP/JSON request of this rank; whole steps go to `out` as lines.
  void add(nlohmann::json request, std::vector<std::string>& out);
  // The spans of no step, as lines.
  void finish(std::vector<std::string>& out);

  std::size_t steps() const { return steps_; }
  // What could not be inferred, for the import's warnings.
  const std::vector<std::string>& notes() const { return notes_; }
  // Spans of each kind seen, to name what is missing.
  std::size_t p2p_spans() const { return p2p_; }
  std::size_t microbatch_spans() const { return microbatch_; }
  // Per p2p kind (recv_forward, send_forward, recv_backward, send_backward):
  // the transfers its schedule makes (a stage with that neighbour: one per
  // microbatch of the direction) and those of them not traced.
  using P2pCounts = std::array<std::int64_t, 4>;
  const P2pCounts& scheduled_transfers() const { return scheduled_; }
  const P2pCounts& untraced_transfers() const { return untraced_; }

  // Every traced transfer, for the clock bounds: its step, kind (the
  // P2pCounts index), microbatch, and the time that bounds the clocks (a
  // send's start, a receive's end) on this rank's clock.
  struct Transfer {
    std::int64_t step = 0;
    int kind = 0;
    std::int64_t microbatch = 0;
    std::int64_t at_ns = 0;
  };
  const std::vector<Transfer>& transfers() const { return transfers_; }
  int rank() const { return rank_; }
  int stage() const { return stage_; }
  // The global rank of its pipeline's first stage (-1 when its place is
  // not known).
  int pipeline_source() const { return pipeline_source_; }
  // A lens.clock_sync span of this rank as a line: its clock's offset from
  // rank 0's, inferred from `messages` matched transfers.
  std::string clock_sample_line(std::int64_t local_ns, std::int64_t offset_ns,
                                std::int64_t uncertainty_ns, std::size_t messages) const;

 private:
  struct Held {
    std::vector<nlohmann::json> spans;
  };
  void place(const nlohmann::json& resource);
  void close_step(const std::string& trace, nlohmann::json& step_span,
                  std::vector<std::string>& out);
  std::string line_of(std::vector<nlohmann::json> spans) const;

  std::string order_;
  nlohmann::json resource_;  // the latest, with the inferred attributes
  bool placed_ = false;
  int stage_ = 0, stages_ = 1, rank_ = -1, pipeline_source_ = -1;
  std::vector<Transfer> transfers_;
  P2pCounts scheduled_{}, untraced_{};
  std::unordered_map<std::string, Held> by_trace_;
  std::vector<std::string> trace_order_;  // first seen first, for the rest
  std::size_t steps_ = 0, p2p_ = 0, microbatch_ = 0;
  std::int64_t counted_steps_ = 0;
  std::vector<std::string> notes_;
};

// Clock offsets from matched messages (docs/megatron-traces.md): a receive
// cannot end before its send began, so within a pipeline the forward
// transfers bound each next stage's offset from below and the backward ones
// from above. Per adjacent pair: the least correction the bounds allow (0
// when they hold it), its uncertainty the farther bound; chained from rank
// 0 along rank 0's pipeline (no message joins other pipelines to it).
struct MessageClock {
  int rank = -1;
  std::int64_t offset_ns = 0;       // rank 0's clock minus this rank's
  std::int64_t uncertainty_ns = 0;  // how far the truth may be from it
  std::size_t messages = 0;         // matched transfers behind it
  bool contradicted = false;        // the bounds crossed (the clocks drifted)
};
struct MessageClocks {
  std::vector<MessageClock> clocks;  // rank 0 first (exact), then its pipeline's stages
  std::vector<std::string> notes;    // what could not be bounded
};
MessageClocks clocks_from_messages(const std::vector<const UpstreamSteps*>& ranks);

}  // namespace lens::analysis
