// What the binding files of lens._lens share (python/*_binding.cc and
// lens_module.cc): the carrier and span types Python holds, and the
// conversions of Python values. Internal to the extension.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <optional>
#include <string>

#include "lens/carrier.h"
#include "lens/span.h"

namespace lens {
struct LiveStraggler;
}

namespace lens_python {

namespace py = pybind11;

// A step carrier as Python sees it. reserved_here marks the carrier this
// process reserved as the broadcast's source: its step span takes the
// carrier's span id. It is not part of the frame.
struct PyCarrier {
  lens::StepCarrier carrier;
  bool reserved_here = false;
  // On the source: when its context was reserved, before the broadcast, on
  // the span clock. Its step span starts then, so that it is the step's
  // first span and every link points back in time.
  std::optional<std::int64_t> reserved_at_unix_ns;
};

// A Python value as an attribute value: bool, int, float and str map to their
// OTel types, lists and tuples of one of them to arrays; anything else is
// recorded as its str() so that instrumentation never fails on a value.
lens::AttributeValue to_value(const py::handle& v);
lens::Attributes to_attributes(const py::dict& attributes);
std::optional<lens::StepCarrier> unwrap(const std::optional<PyCarrier>& c);
// Seconds as Python passes a timeout; ValueError below 0.
std::chrono::milliseconds to_ms(double seconds);

// A span from Python: a context manager that makes the span current on entry
// and ends it on exit, recording an exception that escapes the block.
class PySpan {
 public:
  explicit PySpan(lens::Span span) : span_(std::move(span)) {
    if (span_.recording()) context_ = span_.context();
  }

  bool recording() const { return span_.recording(); }
  bool sampled() const { return context_ && context_->sampled(); }
  // Kept after the span ends, so it can be read after its with block.
  const std::optional<lens::SpanContext>& context() const { return context_; }
  void set_attribute(const std::string& key, const py::handle& value) {
    if (span_.recording()) span_.set_attribute(key, to_value(value));
  }
  void add_event(const std::string& name, const py::dict& attributes) {
    if (span_.recording()) span_.add_event(name, to_attributes(attributes));
  }
  void add_link(const lens::SpanContext& context, const py::dict& attributes) {
    if (span_.recording()) span_.add_link(context, to_attributes(attributes));
  }
  void set_status(const std::string& code, const std::string& message) {
    if (code == "ok")
      span_.set_status(lens::StatusCode::kOk, message);
    else if (code == "error")
      span_.set_status(lens::StatusCode::kError, message);
    else if (code == "unset")
      span_.set_status(lens::StatusCode::kUnset, message);
    else
      throw py::value_error("lens: span status must be 'ok', 'error' or 'unset', not '" + code +
                            "'");
  }
  PySpan& enter() {
    if (!scope_) scope_.emplace(span_);
    return *this;
  }
  bool exit(const py::handle& type, const py::handle& value, const py::handle&) {
    if (!type.is_none() && span_.recording()) {
      const std::string message = py::str(value);
      span_.add_event("exception",
                      {{"exception.type", std::string(py::str(type.attr("__qualname__")))},
                       {"exception.message", message}});
      span_.set_status(lens::StatusCode::kError, message);
    }
    end();
    return false;
  }
  void end() {
    scope_.reset();
    span_.end();
  }
  // Ends it at a time on the span clock (OpenTelemetry's end(end_time)).
  void end_at(std::int64_t end_unix_ns) {
    scope_.reset();
    span_.end_at(end_unix_ns);
  }
  void update_name(const std::string& name) {
    if (span_.recording()) span_.update_name(name);
  }
  const lens::Span& span() const { return span_; }

 private:
  lens::Span span_;
  std::optional<lens::SpanContext> context_;
  std::optional<lens::CurrentSpanScope> scope_;
};

// lens.Span's __enter__ and __exit__ as plain CPython methods on `cls`.
void add_context_manager_methods(const py::object& cls);

// The step protocol's binding (step_binding.cc): lens._lens.StepTrace,
// StepScope and StepMeeting over a torch.distributed group.
void bind_steps(py::module_& m);
// A straggler the live rule named, as Python sees it (a dict).
py::dict straggler_dict(const lens::LiveStraggler& straggler);

}  // namespace lens_python
