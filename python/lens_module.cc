// lens._lens: the Python binding of lens's core (pybind11), one file per
// part: core_binding.cc (contexts, carriers, value conversions),
// span_binding.cc, metrics_binding.cc, telemetry_binding.cc,
// protocol_binding.cc (the step protocol one call at a time) and
// step_binding.cc (the step protocol's objects over a torch group).
//
// The thin Python package around it (python/lens/) gives the reference
// page's names: lens.init, lens.managed_span, lens.distributed.*,
// lens.state.*. This module links liblens.so, so spans started here and
// spans started by C++ code of the same process (e.g. another extension
// linking liblens.so) share one telemetry, processor and exporter.
//
// The GIL is released around everything that may wait: flush, shutdown and
// init (which may create a trace directory or start the export thread).
#include <string>

#include "bindings.h"
#include "lens/error.h"
#include "lens/telemetry.h"

using namespace lens_python;

PYBIND11_MODULE(_lens, m) {
  m.doc() = "lens core binding; use the lens package rather than this module";
  m.attr("__version__") = std::string(lens::kLensVersion);

  py::register_exception<lens::ConfigError>(m, "ConfigError", PyExc_ValueError);
  // CommError before StepCheckError, its subclass: the translator
  // registered last is tried first.
  const auto& comm_error =
      py::register_exception<lens::CommError>(m, "CommError", PyExc_RuntimeError);
  py::register_exception<lens::StepCheckError>(m, "StepCheckError", comm_error.ptr());

  bind_core(m);
  bind_metrics(m);
  bind_spans(m);
  bind_telemetry(m);
  bind_protocol(m);
  bind_steps(m);
}
