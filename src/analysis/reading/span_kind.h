// What a span is by its name: a step, its forward-backward, a microbatch's
// forward or backward, a p2p transfer, a tensor-parallel collective, a
// linked receive, the optimizer, or other. lens's names and Megatron-LM
// upstream's (megatron.train.iteration, its forward_backward and optimizer
// children; lens/semconv.h) alike, and the step span LENS_STEP_SPAN names:
// the one place the readers tell kinds apart.
//
// Thread safety: plain functions.
#pragma once

#include <string>
#include <string_view>

#include "run_reader.h"

namespace lens::analysis {

enum class SpanKind {
  kStep,
  kForwardBackward,
  kForward,
  kBackward,
  kP2p,
  kCollective,  // a tensor-parallel collective (megatron.tp.*), inside a compute
  kLinked,
  kOptimizer,
  kOther
};

SpanKind kind_of(const SpanRow& span);
// A step span that says its step (dl.step): what a step is recognised by.
bool is_step_span(const SpanRow& span);
// A step span's name: lens's, Megatron-LM upstream's
// (megatron.train.iteration) and LENS_STEP_SPAN's.
bool is_step_name(std::string_view name);
// Those names, for a message that says none was found.
std::string step_names_looked_for();
const char* kind_name(SpanKind kind);
// The row a span of this kind is drawn in within its rank's lane:
// 0 step and forward_backward, 1 compute (forward, backward, optimizer),
// 2 p2p, TP collectives and anything else, 3 linked receives (they overlap the p2p receive
// they wrap, so they get a row of their own).
inline constexpr int kLaneRows = 4;
int lane_row(SpanKind kind);

}  // namespace lens::analysis
