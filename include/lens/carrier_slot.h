/// \file
/// The per-process carrier slot: the current step's broadcast context, stored
/// by the step protocol and read by the schedule's receive sites, as
/// set_pp_trace_carrier / get_pp_trace_carrier do in the original.
///
/// Thread safety: set and get may be called from any thread; get returns a copy.
#pragma once

#include <optional>

#include "lens/carrier.h"

namespace lens {

void set_pp_trace_carrier(std::optional<StepCarrier> carrier);
std::optional<StepCarrier> get_pp_trace_carrier();

}  // namespace lens
