// The step protocol for Python (lens._lens.StepTrace, StepScope,
// StepMeeting): the library's StepTrace, StepScope and StepMeeting over a
// torch.distributed group (TorchCommunicator, defined here). The group's broadcast, all-gather and messages
// are Python calls (lens.distributed's _TorchGroup, on byte tensors); the
// protocol itself (the frames, the step checks, the clock samples, the
// meetings) is the C++ one lens-train runs, with no second copy.
#include <algorithm>
#include <memory>
#include <span>
#include <string_view>
#include <tuple>

#include "bindings.h"
#include "lens/communicator.h"
#include "lens/error.h"
#include "lens/live_stragglers.h"
#include "lens/step_meeting.h"
#include "lens/step_trace.h"
#include "lens/telemetry.h"

namespace lens_python {
namespace {

double seconds(std::chrono::milliseconds timeout) {
  return static_cast<double>(timeout.count()) / 1e3;
}

py::bytes bytes_of(std::span<const std::uint8_t> data) {
  return py::bytes(reinterpret_cast<const char*>(data.data()), data.size());
}

// The process's telemetry when a step object was made: it must still be the
// one (lens.shutdown or a new lens.init leaves the object pointing at none).
class TelemetryAtStart {
 public:
  TelemetryAtStart() : telemetry_(lens::get_telemetry()), instance_(id(telemetry_)) {}
  lens::Telemetry* get() const { return telemetry_; }
  void require_same(const char* what) const {
    if (id(lens::get_telemetry()) != instance_)
      throw std::runtime_error(std::string("lens: the telemetry this ") + what +
                               " was made with was shut down or replaced: make a new one");
  }

 private:
  static std::uint64_t id(const lens::Telemetry* t) { return t ? t->instance() : 0; }
  lens::Telemetry* telemetry_;
  std::uint64_t instance_;
};

class PyStepTrace {
 public:
  PyStepTrace(py::object group, py::object job_group, int pipeline_parallel_size, int src_rank,
              std::optional<int> pipeline_rank, std::optional<double> timeout)
      : comm_(std::make_unique<TorchCommunicator>(std::move(group))) {
    if (!job_group.is_none()) job_ = std::make_unique<TorchCommunicator>(std::move(job_group));
    lens::StepTraceOptions o;
    o.src_rank = src_rank;
    o.pipeline_parallel_size = pipeline_parallel_size;
    o.pipeline_rank = pipeline_rank;
    if (timeout) o.timeout = to_ms(*timeout);
    o.job_communicator = job_.get();
    trace_ = std::make_unique<lens::StepTrace>(telemetry_.get(), comm_.get(), std::move(o));
  }
  lens::StepTrace& trace() {
    telemetry_.require_same("StepTrace");
    return *trace_;
  }

 private:
  TelemetryAtStart telemetry_;
  std::unique_ptr<TorchCommunicator> comm_, job_;
  std::unique_ptr<lens::StepTrace> trace_;
};

// One step as a `with` block: the protocol runs on entry (StepScope), the
// step span is open and current inside, and ends on exit.
class PyStepScope {
 public:
  PyStepScope(py::object trace, std::uint64_t step) : trace_(std::move(trace)), step_(step) {}

  PyStepScope& enter() {
    if (scope_) throw std::runtime_error("lens: a StepScope is entered once");
    scope_.emplace(trace_.cast<PyStepTrace&>().trace(), step_);
    if (scope_->span().recording()) context_ = scope_->span().context();
    return *this;
  }
  void exit(const py::handle& type, const py::handle& value, const py::handle&) {
    if (!scope_) return;
    if (!type.is_none()) {
      record_exception(scope_->span(), type, value);
      scope_->exception_escaped();
    }
    scope_.reset();
  }
  lens::Span& span() {
    if (!scope_) throw std::runtime_error("lens: the StepScope is not open (use it in a with block)");
    return scope_->span();
  }
  bool recording() { return scope_ && scope_->span().recording(); }
  const std::optional<lens::SpanContext>& context() const { return context_; }
  std::optional<PyCarrier> carrier() const {
    if (!scope_ || !scope_->carrier()) return std::nullopt;
    return PyCarrier{*scope_->carrier(), false, std::nullopt};
  }

 private:
  py::object trace_;  // kept alive while the step is open
  std::uint64_t step_;
  std::optional<lens::StepScope> scope_;
  std::optional<lens::SpanContext> context_;  // kept after the step ends
};

py::dict outcome_dict(const lens::MeetingOutcome& outcome) {
  py::list stragglers;
  for (const auto& s : outcome.stragglers) stragglers.append(straggler_dict(s));
  py::dict d;
  d["stragglers"] = stragglers;
  d["scores"] = outcome.scores;
  return d;
}

class PyStepMeeting {
 public:
  PyStepMeeting(py::object world, int live_every,
                const std::vector<std::tuple<int, int, int, int>>& ranks,
                std::optional<double> timeout, std::string who)
      : comm_(std::make_unique<TorchCommunicator>(std::move(world))) {
    lens::StepMeetingOptions o;
    o.live_every = live_every;
    for (const auto& [r, s, d, t] : ranks) o.ranks.push_back({r, s, d, t});
    if (timeout) o.timeout = to_ms(*timeout);
    o.who = std::move(who);
    meeting_ = std::make_unique<lens::StepMeeting>(telemetry_.get(), *comm_, std::move(o));
  }
  lens::StepMeeting& meeting() {
    telemetry_.require_same("StepMeeting");
    return *meeting_;
  }

 private:
  TelemetryAtStart telemetry_;
  std::unique_ptr<TorchCommunicator> comm_;
  std::unique_ptr<lens::StepMeeting> meeting_;
};

}  // namespace

TorchCommunicator::TorchCommunicator(py::object group)
    : group_(std::move(group)),
      rank_(group_.attr("rank").cast<int>()),
      size_(group_.attr("size").cast<int>()),
      engine_(group_.attr("engine").cast<std::string>()) {
  if (size_ < 1 || rank_ < 0 || rank_ >= size_)
    throw lens::ConfigError("lens: a group of size " + std::to_string(size_) +
                            " cannot have rank " + std::to_string(rank_));
}

void TorchCommunicator::broadcast(std::span<std::uint8_t> data, int root,
                                  std::chrono::milliseconds timeout) {
  py::gil_scoped_acquire gil;
  fill(data, call("broadcast", [&] {
         return group_.attr("broadcast")(bytes_of(data), root, seconds(timeout));
       }),
       "broadcast");
}

void TorchCommunicator::send(std::span<const std::uint8_t> data, int peer, int tag,
                             std::chrono::milliseconds timeout) {
  py::gil_scoped_acquire gil;
  call("send", [&] { return group_.attr("send")(bytes_of(data), peer, tag, seconds(timeout)); });
}

void TorchCommunicator::recv(std::span<std::uint8_t> data, int peer, int tag,
                             std::chrono::milliseconds timeout) {
  py::gil_scoped_acquire gil;
  fill(data, call("recv", [&] {
         return group_.attr("recv")(data.size(), peer, tag, seconds(timeout));
       }),
       "recv");
}

void TorchCommunicator::gather_from_all(std::span<const std::uint8_t> input,
                                        std::span<std::uint8_t> output,
                                        std::chrono::milliseconds timeout) {
  py::gil_scoped_acquire gil;
  fill(output, call("all_gather", [&] {
         return group_.attr("all_gather")(bytes_of(input), seconds(timeout));
       }),
       "all_gather");
}

template <typename Call>
py::object TorchCommunicator::call(std::string_view what, Call&& body) {
  try {
    return body();
  } catch (const py::error_already_set& e) {
    throw lens::CommError(describe_failure(what, e.what()));
  }
}

void TorchCommunicator::fill(std::span<std::uint8_t> out, const py::object& got,
                             std::string_view what) {
  if (!py::isinstance<py::bytes>(got))
    throw lens::CommError(describe_failure(what, "the group's call did not return bytes"));
  const std::string_view bytes = py::reinterpret_borrow<py::bytes>(got);
  if (bytes.size() != out.size())
    throw lens::CommError(describe_failure(what, std::to_string(bytes.size()) + " bytes, " +
                                                     std::to_string(out.size()) + " expected"));
  std::copy(bytes.begin(), bytes.end(), out.begin());
}

void bind_steps(py::module_& m) {
  // Registered first, so that StepTrace.step's signature names it.
  py::class_<PyStepScope, std::unique_ptr<PyStepScope>> step_scope(m, "StepScope");
  py::class_<PyStepTrace>(m, "StepTrace")
      .def(py::init<py::object, py::object, int, int, std::optional<int>, std::optional<double>>(),
           py::arg("group"), py::arg("job_group"), py::arg("pipeline_parallel_size"),
           py::arg("src_rank") = 0, py::arg("pipeline_rank") = py::none(),
           py::arg("timeout") = py::none())
      .def(
          "step",
          [](py::object self, std::uint64_t step) {
            return std::make_unique<PyStepScope>(self, step);  // not movable: held as it is
          },
          py::arg("step"))
      .def_property_readonly("gated", [](PyStepTrace& t) { return t.trace().gated(); })
      .def_property_readonly("measures_clocks",
                             [](PyStepTrace& t) { return t.trace().measures_clocks(); })
      .def(
          "recv_forward_linked",
          [](PyStepTrace& t, std::int64_t microbatch) {
            return std::make_unique<PySpan>(t.trace().recv_forward_linked(microbatch));
          },
          py::arg("microbatch_id"))
      .def(
          "set_job_span", [](PyStepTrace& t, const PySpan& job) { t.trace().set_job_span(job.span()); },
          py::arg("job"))
      .def("finish", [](PyStepTrace& t) { t.trace().finish(); });

  step_scope.def("__enter__", &PyStepScope::enter, py::return_value_policy::reference_internal)
      .def("__exit__", &PyStepScope::exit)
      .def_property_readonly("recording", &PyStepScope::recording)
      .def_property_readonly("context", &PyStepScope::context)
      .def_property_readonly("carrier", &PyStepScope::carrier)
      .def(
          "set_attribute",
          [](PyStepScope& s, const std::string& key, const py::handle& value) {
            if (s.recording()) s.span().set_attribute(key, to_value(value));
          },
          py::arg("key"), py::arg("value"))
      .def(
          "add_event",
          [](PyStepScope& s, const std::string& name, const py::dict& attributes) {
            if (s.recording()) s.span().add_event(name, to_attributes(attributes));
          },
          py::arg("name"), py::arg("attributes") = py::dict());

  py::class_<PyStepMeeting>(m, "StepMeeting")
      .def(py::init<py::object, int, const std::vector<std::tuple<int, int, int, int>>&,
                    std::optional<double>, std::string>(),
           py::arg("world"), py::arg("live_every") = 0,
           py::arg("ranks") = std::vector<std::tuple<int, int, int, int>>{},
           py::arg("timeout") = py::none(), py::arg("who") = "")
      .def_property_readonly("every", [](PyStepMeeting& m) { return m.meeting().every(); })
      .def_property_readonly("tail_selection",
                             [](PyStepMeeting& m) { return m.meeting().tail_selection(); })
      .def("hold_warning", [](PyStepMeeting& m) { return m.meeting().hold_warning(); })
      .def(
          "step_done",
          [](PyStepMeeting& m, std::uint64_t step, double compute_ms, double step_seconds) {
            return m.meeting().step_done(step, compute_ms, step_seconds);
          },
          py::arg("step"), py::arg("compute_ms"), py::arg("step_seconds"))
      .def(
          "meet",
          [](PyStepMeeting& m, std::int64_t step, PyStepScope* step_scope) {
            return outcome_dict(m.meeting().meet(step, step_scope ? &step_scope->span() : nullptr));
          },
          py::arg("step"), py::arg("step_scope") = nullptr)
      .def(
          "finish",
          [](PyStepMeeting& m, std::int64_t last_step) -> std::optional<py::dict> {
            const auto outcome = m.meeting().finish(last_step);
            if (!outcome) return std::nullopt;
            return outcome_dict(*outcome);
          },
          py::arg("last_step"));
}

}  // namespace lens_python
