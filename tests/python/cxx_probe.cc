// A second extension module of the same process, standing for a user's C++
// code: it links liblens.so and traces through lens::get_telemetry(), so the
// Python tests can check that both sides share one telemetry and one
// current-span stack.
#include <pybind11/pybind11.h>

#include "lens/carrier_slot.h"
#include "lens/telemetry.h"
#include "lens/trace_context.h"

PYBIND11_MODULE(lens_cxx_probe, m) {
  // Starts and ends a span in the `job` group under the thread's current
  // span; returns its traceparent, or "" when telemetry is off.
  m.def("emit_span", [](const std::string& name) {
    lens::Telemetry* t = lens::get_telemetry();
    if (!t) return std::string();
    lens::Span span = t->tracer("cxx.probe").start_span(lens::SpanGroup::kJob, name);
    const std::string tp = lens::format_traceparent(span.context());
    span.end();
    return tp;
  });
  // The trace id of the carrier in the C++ carrier slot, or "".
  m.def("carrier_trace_id", [] {
    auto c = lens::get_pp_trace_carrier();
    return c ? c->context.trace_id.to_hex() : std::string();
  });
}
