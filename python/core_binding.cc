// lens._lens's core types: SpanContext and Carrier, and the conversions of
// Python values every binding file uses (bindings.h).
#include <array>
#include <chrono>
#include <optional>
#include <string>

#include "bindings.h"
#include "lens/carrier.h"
#include "lens/error.h"
#include "lens/ids.h"
#include "lens/span_groups.h"
#include "lens/trace_context.h"

namespace lens_python {

lens::AttributeValue to_value(const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::int_>(v)) {
    try {
      return v.cast<std::int64_t>();
    } catch (const py::cast_error&) {
      return std::string(py::str(v));  // beyond 64 bits
    }
  }
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    py::sequence seq = py::reinterpret_borrow<py::sequence>(v);
    bool all_bool = true, all_int = true, all_num = true, all_str = true;
    for (const auto& item : seq) {
      const bool b = py::isinstance<py::bool_>(item);
      const bool i = py::isinstance<py::int_>(item) && !b;
      const bool f = py::isinstance<py::float_>(item);
      all_bool &= b;
      all_int &= i;
      all_num &= i || f;
      all_str &= py::isinstance<py::str>(item);
    }
    if (seq.size() == 0) return std::vector<std::string>{};
    try {
      if (all_bool) return seq.cast<std::vector<bool>>();
      if (all_int) return seq.cast<std::vector<std::int64_t>>();
      if (all_num) return seq.cast<std::vector<double>>();
      if (all_str) return seq.cast<std::vector<std::string>>();
    } catch (const py::cast_error&) {
    }
  }
  return std::string(py::str(v));
}

lens::Attributes to_attributes(const py::dict& attributes) {
  lens::Attributes out;
  out.reserve(attributes.size());
  for (const auto& [k, v] : attributes) out.push_back({std::string(py::str(k)), to_value(v)});
  return out;
}
std::optional<lens::StepCarrier> unwrap(const std::optional<PyCarrier>& c) {
  if (!c) return std::nullopt;
  return c->carrier;
}

std::chrono::milliseconds to_ms(double seconds) {
  if (!(seconds >= 0)) throw py::value_error("lens: a timeout must be a number of seconds >= 0");
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

lens::SpanGroup group_from_name(std::string_view name) {
  for (int i = 0; i < lens::kSpanGroupCount; ++i) {
    const auto g = static_cast<lens::SpanGroup>(i);
    if (lens::span_group_name(g) == name) return g;
  }
  std::string valid;
  for (int i = 0; i < lens::kSpanGroupCount; ++i)
    valid += std::string(i ? ", " : "") +
             std::string(lens::span_group_name(static_cast<lens::SpanGroup>(i)));
  throw py::value_error("lens: unknown span group '" + std::string(name) + "' (valid: " + valid +
                        ")");
}

void bind_core(py::module_& m) {
  py::class_<lens::SpanContext>(m, "SpanContext")
      .def_property_readonly("trace_id",
                             [](const lens::SpanContext& c) { return c.trace_id.to_hex(); })
      .def_property_readonly("span_id",
                             [](const lens::SpanContext& c) { return c.span_id.to_hex(); })
      .def_property_readonly("trace_flags",
                             [](const lens::SpanContext& c) { return c.trace_flags; })
      .def_property_readonly("sampled", &lens::SpanContext::sampled)
      .def_property_readonly("is_remote", [](const lens::SpanContext& c) { return c.remote; })
      .def_property_readonly("tracestate", [](const lens::SpanContext& c) { return c.tracestate; })
      .def("traceparent", [](const lens::SpanContext& c) { return lens::format_traceparent(c); })
      // As ints, OpenTelemetry Python's own SpanContext takes them.
      .def_property_readonly("trace_id_int",
                             [](const lens::SpanContext& c) {
                               const auto& b = c.trace_id.bytes();
                               return py::reinterpret_steal<py::int_>(
                                   _PyLong_FromByteArray(b.data(), b.size(), 0, 0));
                             })
      .def_property_readonly("span_id_int",
                             [](const lens::SpanContext& c) {
                               const auto& b = c.span_id.bytes();
                               std::uint64_t w = 0;
                               for (std::uint8_t x : b) w = (w << 8) | x;
                               return w;
                             })
      .def_static(
          "from_ints",
          [](const py::int_& trace_id, std::uint64_t span_id, std::uint8_t trace_flags,
             bool remote, const std::string& tracestate) {
            std::array<std::uint8_t, lens::TraceId::kSize> t{};
            if (_PyLong_AsByteArray(reinterpret_cast<PyLongObject*>(trace_id.ptr()), t.data(),
                                    t.size(), 0, 0) < 0)
              throw py::error_already_set();
            lens::SpanContext c;
            c.trace_id = lens::TraceId(t);
            c.span_id = lens::SpanId::from_word(span_id);
            c.trace_flags = trace_flags;
            c.remote = remote;
            c.tracestate = tracestate;
            return c;
          },
          py::arg("trace_id"), py::arg("span_id"), py::arg("trace_flags"),
          py::arg("remote") = false, py::arg("tracestate") = "")
      .def_static(
          "from_traceparent",
          [](const std::string& traceparent, const std::string& tracestate) {
            return lens::parse_trace_context(traceparent, tracestate);
          },
          py::arg("traceparent"), py::arg("tracestate") = "")
      .def("__repr__", [](const lens::SpanContext& c) {
        return "<lens.SpanContext " + lens::format_traceparent(c) + ">";
      });

  py::class_<PyCarrier>(m, "Carrier")
      .def_property_readonly("context", [](const PyCarrier& c) { return c.carrier.context; })
      .def_property_readonly("trace_id",
                             [](const PyCarrier& c) { return c.carrier.context.trace_id.to_hex(); })
      .def_property_readonly("span_id",
                             [](const PyCarrier& c) { return c.carrier.context.span_id.to_hex(); })
      .def_property_readonly("sampled",
                             [](const PyCarrier& c) { return c.carrier.context.sampled(); })
      .def_property_readonly("step", [](const PyCarrier& c) { return c.carrier.step; })
      .def_readonly("reserved_here", &PyCarrier::reserved_here)
      .def("__repr__", [](const PyCarrier& c) {
        return "<lens.Carrier step=" + std::to_string(c.carrier.step) + " " +
               lens::format_traceparent(c.carrier.context) + ">";
      });
}

}  // namespace lens_python
