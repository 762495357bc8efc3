// What the binding files of lens._lens share (python/*_binding.cc and
// lens_module.cc): the carrier and span types Python holds, the conversions
// of Python values, the module's state per telemetry, and each file's bind_
// function. Internal to the extension.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "lens/carrier.h"
#include "lens/clock_schedule.h"
#include "lens/communicator.h"
#include "lens/semconv.h"
#include "lens/span.h"
#include "lens/span_groups.h"
#include "lens/step_budget.h"
#include "lens/step_check.h"
#include "lens/step_figures.h"
#include "lens/tracer.h"

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

// An exception leaving a `with` block (its type and value as __exit__ gets
// them) recorded on the span, when it records: an `exception` event and an
// error status.
void record_exception(lens::Span& span, const py::handle& type, const py::handle& value);

// A span from Python: a context manager that makes the span current on entry
// and ends it on exit, recording an exception that escapes the block.
class PySpan {
 public:
  explicit PySpan(lens::Span span) : span_(std::move(span)) {
    if (span_.recording()) context_ = span_.context();
  }
  // Collected without end() (the API's spans end only when asked to): ended
  // here, marked truncated, so that no reader takes this for its end.
  ~PySpan() {
    if (!span_.recording()) return;
    span_.set_attribute(lens::semconv::kTruncated, true);
    span_.set_attribute(lens::semconv::kEndedBy, std::string(lens::semconv::kEndedByCollection));
  }
  PySpan(const PySpan&) = delete;
  PySpan& operator=(const PySpan&) = delete;

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
    if (!type.is_none()) record_exception(span_, type, value);
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

// A span group by its name; ValueError naming the valid ones otherwise.
lens::SpanGroup group_from_name(std::string_view name);
// A step figure by its name ("compute", "p2p_wait", ...); ValueError otherwise.
lens::StepFigure figure_from_name(std::string_view name);
// A straggler the live rule named, as Python sees it (a dict).
py::dict straggler_dict(const lens::LiveStraggler& straggler);
// One attribute from Python onto a span (exact bool, int, float and str
// without a copy of the key), and a dict's.
void set_py_attribute(lens::Span& span, PyObject* key, PyObject* value);
void set_py_attributes(lens::Span& span, const py::dict& attributes);

// A torch.distributed group as a Communicator: `group` is a Python object
// with rank, size, engine and broadcast(data, root, timeout),
// all_gather(data, timeout), send(data, peer, tag, timeout) and
// recv(size, peer, tag, timeout) (lens.distributed's _TorchGroup), ranks in
// the group, timeouts in seconds, data as bytes. A Python exception, or a
// reply of the wrong type or size, is a CommError naming the call. One kept
// in the module's static state lends its group only for a call (Lend), so
// that nothing of Python's outlives the interpreter there.
class TorchCommunicator : public lens::Communicator {
 public:
  explicit TorchCommunicator(py::object group);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string engine() const override { return engine_; }
  void broadcast(std::span<std::uint8_t> data, int root,
                 std::chrono::milliseconds timeout) override;
  void send(std::span<const std::uint8_t> data, int peer, int tag,
            std::chrono::milliseconds timeout) override;
  void recv(std::span<std::uint8_t> data, int peer, int tag,
            std::chrono::milliseconds timeout) override;

  // The group for the lifetime of this value, then none.
  struct Lend {
    Lend(TorchCommunicator& c, py::object group) : c_(c) { c_.group_ = std::move(group); }
    ~Lend() { c_.group_ = py::object(); }
    Lend(const Lend&) = delete;
    Lend& operator=(const Lend&) = delete;
    TorchCommunicator& c_;
  };

 protected:
  void gather_from_all(std::span<const std::uint8_t> input, std::span<std::uint8_t> output,
                       std::chrono::milliseconds timeout) override;

 private:
  template <typename Call>
  py::object call(std::string_view what, Call&& body);
  void fill(std::span<std::uint8_t> out, const py::object& got, std::string_view what);

  py::object group_;
  int rank_, size_;
  std::string engine_;
};

// What the module keeps per process-wide telemetry: its tracer and, as a
// step source, its step budget (LENS_STEP_BUDGET). Rebuilt whenever the
// telemetry changes (init, shutdown): keyed on Telemetry::instance(), since a
// new telemetry may take the address of the one before it.
struct PerTelemetry {
  std::uint64_t owner = 0;  // 0: none
  lens::Tracer tracer;
  lens::StepBudget budget;
  // The step checks of derived step contexts (step_check.h).
  lens::StepCheckSchedule checks;
  // The clock sync's engine (the world group, lent for each sample) and
  // schedule, made at the first sample.
  std::unique_ptr<TorchCommunicator> clock_engine;
  std::unique_ptr<lens::ClockSchedule> clock;
  // The rank's job span (start_job_span), which every step span links to.
  std::optional<lens::SpanContext> job;
};
// The current telemetry's (protocol_binding.cc).
PerTelemetry& per_telemetry();

// Each binding file's part of the module, in the order lens_module.cc
// calls them.
void bind_core(py::module_& m);       // core_binding.cc
void bind_metrics(py::module_& m);    // metrics_binding.cc
void bind_spans(py::module_& m);      // span_binding.cc
void bind_telemetry(py::module_& m);  // telemetry_binding.cc
void bind_protocol(py::module_& m);   // protocol_binding.cc
// lens._lens.StepTrace, StepScope and StepMeeting over a torch.distributed
// group (step_binding.cc).
void bind_steps(py::module_& m);

}  // namespace lens_python
