// The per-process carrier slot (carrier_slot.h).
#include "lens/carrier_slot.h"

#include <mutex>

namespace lens {
namespace {

std::mutex g_slot_mu;
std::optional<StepCarrier> g_slot;

}  // namespace

void set_pp_trace_carrier(std::optional<StepCarrier> carrier) {
  std::lock_guard<std::mutex> lock(g_slot_mu);
  g_slot = std::move(carrier);
}

std::optional<StepCarrier> get_pp_trace_carrier() {
  std::lock_guard<std::mutex> lock(g_slot_mu);
  return g_slot;
}

}  // namespace lens
