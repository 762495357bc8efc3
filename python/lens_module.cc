// lens._lens: the Python binding of lens's core (pybind11).
//
// The thin Python package around it (python/lens/) gives the reference
// page's names: lens.init, lens.managed_span, lens.distributed.*,
// lens.state.*. This module links liblens.so, so spans started here and
// spans started by C++ code of the same process (e.g. another extension
// linking liblens.so) share one telemetry, processor and exporter.
//
// The GIL is released around everything that may wait: flush, shutdown and
// init (which may create a trace directory or start the export thread).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "lens/broadcast_trace_context.h"
#include "lens/carrier.h"
#include "lens/carrier_slot.h"
#include "lens/clock_schedule.h"
#include "lens/communicator.h"
#include "lens/error.h"
#include "lens/ids.h"
#include "lens/linked_span.h"
#include "lens/live_stragglers.h"
#include "lens/metrics.h"
#include "lens/metrics_endpoint.h"
#include "lens/metrics_exporter.h"
#include "lens/pipeline_stats.h"
#include "lens/startup_agreement.h"
#include "lens/step_check.h"
#include "lens/step_figures.h"
#include "lens/step_metrics.h"
#include "lens/step_trace.h"
#include "lens/tail_selection.h"
#include "lens/telemetry.h"
#include "lens/termination.h"
#include "lens/trace_context.h"
#include "lens/semconv.h"
#include "bindings.h"

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


namespace {


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


// The span's context-manager protocol as plain CPython methods: a `with`
// block then crosses into pybind's dispatcher once (start_span), not three
// times. The instance is always a lens.Span made by this module, so its
// value is read directly.
PySpan& span_of(PyObject* self) {
  auto* inst = reinterpret_cast<py::detail::instance*>(self);
  return *inst->get_value_and_holder().value_ptr<PySpan>();
}

PyObject* span_enter(PyObject* self, PyObject*) {
  span_of(self).enter();
  Py_INCREF(self);
  return self;
}

// Runs a raw CPython function's work and turns a C++ exception into the
// Python error it stands for (nullptr then).
template <typename Body>
PyObject* translating(Body&& body) {
  try {
    return body();
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyObject* span_exit(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "lens.Span.__exit__ takes 3 arguments");
    return nullptr;
  }
  return translating([&]() -> PyObject* {
    span_of(self).exit(args[0], args[1], args[2]);
    Py_RETURN_FALSE;
  });
}

PyMethodDef span_enter_def{"__enter__", span_enter, METH_NOARGS,
                           "Makes the span current on this thread; returns it."};
PyMethodDef span_exit_def{"__exit__",
                          reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(span_exit)),
                          METH_FASTCALL, "Records an escaping exception and ends the span."};

}  // namespace

void add_context_manager_methods(const py::object& cls) {
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  for (PyMethodDef* def : {&span_enter_def, &span_exit_def}) {
    py::object method = py::reinterpret_steal<py::object>(PyDescr_NewMethod(type, def));
    if (!method) throw py::error_already_set();
    cls.attr(def->ml_name) = method;
  }
}

namespace {

// The world group of torch.distributed as a Communicator, for the clock
// sync only: point-to-point messages go through Python callables
// (lens.distributed passes ones over dist.isend / dist.irecv of byte
// tensors), so the exchange and its rules stay in C++. Collectives are not
// needed by the clock sync and refuse. The callables are held only during a
// sample (Use), so that nothing of Python's is left in the module's static
// state when the interpreter finalises.
class PythonPointToPoint : public lens::Communicator {
 public:
  PythonPointToPoint(int rank, int size, std::string engine)
      : rank_(rank), size_(size), engine_(std::move(engine)) {}

  struct Use {
    Use(PythonPointToPoint& p, py::function send, py::function recv) : p_(p) {
      p_.send_ = std::move(send);
      p_.recv_ = std::move(recv);
    }
    ~Use() {
      p_.send_ = py::function();
      p_.recv_ = py::function();
    }
    PythonPointToPoint& p_;
  };
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string engine() const override { return engine_; }
  void broadcast(std::span<std::uint8_t>, int, std::chrono::milliseconds) override {
    throw lens::CommError(describe_failure("broadcast", "point-to-point only"));
  }
  void send(std::span<const std::uint8_t> data, int peer, int tag,
            std::chrono::milliseconds timeout) override {
    try {
      send_(py::bytes(reinterpret_cast<const char*>(data.data()), data.size()), peer, tag,
            static_cast<double>(timeout.count()) / 1e3);
    } catch (const py::error_already_set& e) {
      throw lens::CommError(describe_failure("send", e.what()));
    }
  }
  void recv(std::span<std::uint8_t> data, int peer, int tag,
            std::chrono::milliseconds timeout) override {
    std::string got;
    try {
      got = py::bytes(recv_(data.size(), peer, tag, static_cast<double>(timeout.count()) / 1e3));
    } catch (const py::error_already_set& e) {
      throw lens::CommError(describe_failure("recv", e.what()));
    } catch (const py::cast_error& e) {
      throw lens::CommError(describe_failure("recv", "the receive did not return bytes"));
    }
    if (got.size() != data.size())
      throw lens::CommError(describe_failure(
          "recv",
          std::to_string(got.size()) + " bytes, " + std::to_string(data.size()) + " expected"));
    std::copy(got.begin(), got.end(), data.begin());
  }

 protected:
  void gather_from_all(std::span<const std::uint8_t>, std::span<std::uint8_t>,
                       std::chrono::milliseconds) override {
    throw lens::CommError(describe_failure("all_gather", "point-to-point only"));
  }

 private:
  int rank_, size_;
  std::string engine_;
  py::function send_, recv_;
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
  // The clock sync's engine and schedule, made at the first sample.
  std::unique_ptr<PythonPointToPoint> clock_engine;
  std::unique_ptr<lens::ClockSchedule> clock;
  // The rank's job span (start_job_span), which every step span links to.
  std::optional<lens::SpanContext> job;
};

// step_context= as lens.init takes it: "broadcast" or "derived".
std::optional<lens::StepContextMode> step_context_option(const std::optional<std::string>& v) {
  if (!v) return std::nullopt;
  if (*v == "broadcast") return lens::StepContextMode::kBroadcast;
  if (*v == "derived") return lens::StepContextMode::kDerived;
  throw lens::ConfigError("step_context='" + *v + "' is not valid; accepted: broadcast, derived");
}

PerTelemetry& per_telemetry() {
  static PerTelemetry state;
  lens::Telemetry* t = lens::get_telemetry();
  const std::uint64_t instance = t ? t->instance() : 0;
  if (instance != state.owner) {
    state.tracer = t ? t->tracer(lens::kDefaultTracerName) : lens::Tracer();
    // As StepTrace does (step_context.h): a shared budget where more than
    // one rank decides a step, and the step checks that renew it. A setting
    // that cannot work is raised by step_check_due, at the first step.
    const lens::TraceScope scope = t ? t->config().trace_scope : lens::TraceScope::kWorld;
    state.budget = lens::StepBudget(t ? t->config().step_budget_per_minute : 0,
                                    t && lens::step_budget_shared(t->config(), scope));
    std::uint32_t every = 0;
    try {
      if (t) every = lens::step_check_interval(t->config(), scope);
    } catch (const lens::ConfigError&) {
    }
    state.checks = lens::StepCheckSchedule(every);
    state.clock.reset();
    state.clock_engine.reset();
    state.job.reset();
    state.owner = instance;
  }
  return state;
}

// The telemetry a step's context is made with; refuses pipeline scope
// without its settings, as StepTrace does.
lens::Telemetry* step_telemetry() {
  lens::Telemetry* t = lens::get_telemetry();
  if (!t) throw std::runtime_error("lens: telemetry is not initialised");
  if (t->config().trace_scope == lens::TraceScope::kPipeline)
    lens::require_pipeline_scope_settings(t->config());
  return t;
}

// A str's UTF-8 bytes without a copy (CPython caches them in the object).
std::string_view utf8_view(PyObject* s) {
  Py_ssize_t n = 0;
  const char* data = PyUnicode_AsUTF8AndSize(s, &n);
  if (data == nullptr) throw py::error_already_set();
  return {data, static_cast<std::size_t>(n)};
}

// Sets one attribute from Python, with no copy of the key and no variant
// for the common scalar types (exact bool, int, float, str).
void set_py_attribute(lens::Span& span, PyObject* key, PyObject* value) {
  const std::string_view k = PyUnicode_Check(key) ? utf8_view(key) : std::string_view();
  if (k.data() == nullptr) {
    span.set_attribute(std::string(py::str(key)), to_value(value));
  } else if (PyBool_Check(value)) {
    span.set_attribute(k, value == Py_True);
  } else if (PyLong_CheckExact(value)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow == 0 && !(v == -1 && PyErr_Occurred())) {
      span.set_attribute(k, static_cast<std::int64_t>(v));
    } else {
      PyErr_Clear();
      span.set_attribute(k, to_value(value));  // beyond 64 bits
    }
  } else if (PyFloat_CheckExact(value)) {
    span.set_attribute(k, PyFloat_AS_DOUBLE(value));
  } else if (PyUnicode_CheckExact(value)) {
    span.set_attribute(k, utf8_view(value));
  } else {
    span.set_attribute(k, to_value(value));
  }
}

// Sets a dict's attributes on a span.
void set_py_attributes(lens::Span& span, const py::dict& attributes) {
  PyObject *key = nullptr, *value = nullptr;
  Py_ssize_t at = 0;
  while (PyDict_Next(attributes.ptr(), &at, &key, &value)) set_py_attribute(span, key, value);
}

// A span started with `start`, its attributes set when it records.
std::unique_ptr<PySpan> started(const lens::Tracer& tracer, lens::SpanGroup group,
                                std::string_view name, const lens::StartOptions& start,
                                const py::dict& attributes) {
  lens::Span span = tracer.start_span(group, name, start);
  if (span.recording()) set_py_attributes(span, attributes);
  return std::make_unique<PySpan>(std::move(span));
}

// The attribute names lens.otel's C path reads and sets, made once.
PyObject* interned(const char* text) {
  PyObject* s = PyUnicode_InternFromString(text);
  if (s == nullptr) throw py::error_already_set();
  return s;  // kept for the process
}
PyObject* native_name() {
  static PyObject* const name = interned("_native");
  return name;
}
PyObject* ended_name() {
  static PyObject* const name = interned("_ended");
  return name;
}

// A step span joining the step's shared trace (lens.managed_span's and
// lens.otel's): a root span in it; the source rank's takes the span id it
// reserved, so the others' links resolve, and starts when it reserved the
// context (before its broadcast); in pipeline scope a replica's step span
// links to global rank 0's.
void join_step_trace(lens::StartOptions& start, const PyCarrier& join) {
  start.parent.reset();
  start.context = lens::step_span_context(join.carrier, join.reserved_here);
  if (join.reserved_here) start.start_time_unix_ns = join.reserved_at_unix_ns;
  const lens::Telemetry* t = lens::get_telemetry();
  if (t && t->config().trace_scope == lens::TraceScope::kPipeline) {
    lens::require_pipeline_scope_settings(t->config());
    if (auto link = lens::global_rank_zero_link(*t, join.carrier)) start.links.push_back(*link);
  }
}

// lens.otel's common start and end in C (otel.py, _CurrentSpan): a span
// of `group` named `name`, child of the API's current span when that is a
// lens.otel.Span (a root when there is none), its attributes set, made the
// current span in a new API Context set on the API's ContextVar. Returns
// (span, token), or None where the Python path must decide (the group off,
// a foreign or unsampled parent, a span sampled out). The span is a
// `span_type` made without __init__: its class defaults, and _native.
// args: name, group, attributes (dict), the ContextVar, the span key, the
// Span type, the Context type.
PyObject* otel_fast_start(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 7) {
    PyErr_SetString(PyExc_TypeError, "otel_fast_start takes 7 arguments");
    return nullptr;
  }
  PyObject* var = args[3];
  PyObject* key = args[4];
  auto* span_type = reinterpret_cast<PyTypeObject*>(args[5]);
  return translating([&]() -> PyObject* {
    const lens::SpanGroup group = group_from_name(utf8_view(args[1]));
    PerTelemetry& state = per_telemetry();
    if (!state.tracer.enabled(group)) Py_RETURN_NONE;
    PyObject* current = nullptr;
    if (PyContextVar_Get(var, nullptr, &current) < 0) return nullptr;
    py::object current_ctx = py::reinterpret_steal<py::object>(current);
    if (current == nullptr || !PyDict_Check(current)) Py_RETURN_NONE;
    lens::StartOptions start;
    PyObject* parent = PyDict_GetItemWithError(current, key);  // borrowed
    if (parent == nullptr && PyErr_Occurred()) return nullptr;
    if (parent == nullptr) {
      start.root = true;
    } else {
      if (Py_TYPE(parent) != span_type) Py_RETURN_NONE;
      PyObject* native = PyObject_GetAttr(parent, native_name());
      if (native == nullptr) return nullptr;
      py::object holder = py::reinterpret_steal<py::object>(native);
      const auto& context = holder.cast<const PySpan&>().context();
      if (!context || !context->sampled()) Py_RETURN_NONE;
      start.parent = *context;
    }
    lens::Span span = state.tracer.start_span(group, utf8_view(args[0]), start);
    if (!span.recording() || !span.context().sampled()) {
      span.end();
      Py_RETURN_NONE;
    }
    if (PyDict_Check(args[2])) set_py_attributes(span, py::reinterpret_borrow<py::dict>(args[2]));
    py::object native = py::cast(std::make_unique<PySpan>(std::move(span)));
    py::object obj = py::reinterpret_steal<py::object>(span_type->tp_alloc(span_type, 0));
    if (!obj || PyObject_SetAttr(obj.ptr(), native_name(), native.ptr()) < 0) return nullptr;
    py::object values = py::reinterpret_steal<py::object>(PyDict_Copy(current));
    if (!values || PyDict_SetItem(values.ptr(), key, obj.ptr()) < 0) return nullptr;
    py::object context = py::reinterpret_steal<py::object>(PyObject_CallOneArg(args[6], values.ptr()));
    if (!context) return nullptr;
    PyObject* token = PyContextVar_Set(var, context.ptr());
    if (token == nullptr) return nullptr;
    return PyTuple_Pack(2, obj.ptr(), py::reinterpret_steal<py::object>(token).ptr());
  });
}

// Its end, when the block raised nothing: the ContextVar reset to `token`,
// the span marked ended and its native span ended. args: the ContextVar,
// the token, the span.
PyObject* otel_fast_end(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "otel_fast_end takes 3 arguments");
    return nullptr;
  }
  if (PyContextVar_Reset(args[0], args[1]) < 0) return nullptr;
  return translating([&]() -> PyObject* {
    PyObject* native = PyObject_GetAttr(args[2], native_name());
    if (native == nullptr) return nullptr;
    py::object holder = py::reinterpret_steal<py::object>(native);
    if (PyObject_SetAttr(args[2], ended_name(), Py_True) < 0) return nullptr;
    holder.cast<PySpan&>().end();
    Py_RETURN_NONE;
  });
}

PyMethodDef otel_fast_start_def{
    "otel_fast_start", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(otel_fast_start)),
    METH_FASTCALL, "lens.otel's common span start (otel.py)."};
PyMethodDef otel_fast_end_def{
    "otel_fast_end", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(otel_fast_end)),
    METH_FASTCALL, "lens.otel's common span end (otel.py)."};

// `join` is a lens.Carrier or None; taken as a handle, since pybind's
// conversion of None to a null pointer first tries the None as a Carrier
// (an AttributeError formatted and dropped on every call).
// `stream` is None or a CUDA stream's handle as an int (what
// torch.cuda.Stream.cuda_stream gives): the span is then timed on the device.
// A step figure by its name ("compute", "p2p_wait", ...): ValueError for another.
lens::StepFigure figure_from_name(std::string_view name) {
  for (int i = 1; i < lens::kStepFigureCount; ++i) {
    const auto f = static_cast<lens::StepFigure>(i);
    if (lens::step_figure_name(f) == name) return f;
  }
  throw py::value_error("lens: unknown step figure '" + std::string(name) +
                        "' (valid: compute, p2p_wait, p2p_send, all_reduce, optimizer)");
}

// A thread's totals as {name: {"seconds": s, "spans": n}}, and back.
py::dict figures_to_dict(const lens::StepFigureTotals& totals) {
  py::dict d;
  for (int i = 1; i < lens::kStepFigureCount; ++i) {
    py::dict f;
    f["seconds"] = totals.seconds(static_cast<lens::StepFigure>(i));
    f["spans"] = totals.spans[i];
    d[py::str(std::string(lens::step_figure_name(static_cast<lens::StepFigure>(i))))] = f;
  }
  return d;
}
lens::StepFigureTotals figures_from_dict(const py::dict& d) {
  lens::StepFigureTotals totals;
  for (const auto& [key, value] : d) {
    const auto i = static_cast<std::size_t>(figure_from_name(key.cast<std::string>()));
    const py::dict f = value.cast<py::dict>();
    const double seconds = f["seconds"].cast<double>();
    if (!(seconds >= 0)) throw py::value_error("lens: a step figure's seconds must be >= 0");
    totals.ns[i] = static_cast<std::int64_t>(seconds * 1e9);
    totals.spans[i] = f.contains("spans") ? f["spans"].cast<std::uint32_t>() : 1u;
  }
  return totals;
}

std::unique_ptr<PySpan> start_span(std::string_view name, std::string_view group,
                                   const py::dict& attributes, const py::handle& join_arg,
                                   const py::handle& stream, const py::handle& figure) {
  const PyCarrier* join = join_arg.is_none() ? nullptr : &join_arg.cast<const PyCarrier&>();
  const lens::SpanGroup g = group_from_name(group);
  PerTelemetry& state = per_telemetry();
  lens::Tracer& tracer = state.tracer;
  if (!tracer.enabled(g)) return std::make_unique<PySpan>(lens::Span());
  lens::StartOptions start;
  if (!figure.is_none()) start.figure = figure_from_name(figure.cast<std::string>());
  if (!stream.is_none()) {
    if (!py::isinstance<py::int_>(stream) || stream.cast<py::int_>() < py::int_(0))
      throw py::value_error("lens: stream must be a CUDA stream's handle (an int >= 0)");
    start.device_stream = reinterpret_cast<void*>(stream.cast<std::uintptr_t>());
  }
  if (g == lens::SpanGroup::kStep && state.job)
    start.links.push_back({*state.job, {{"lens.link", std::string("job")}}});
  if (join) join_step_trace(start, *join);
  return started(tracer, g, name, start, attributes);
}

// A span of the OpenTelemetry API provider (lens.otel): its parent given
// (the API's context decides it, not this thread's current lens span), or
// none for a root; its kind, links and start time as the API passes them.
// Group off or no telemetry: a span that is not recorded.
std::unique_ptr<PySpan> start_otel_span(std::string_view name, std::string_view group,
                                        const py::handle& parent, int kind,
                                        const py::dict& attributes, const py::handle& links,
                                        const py::handle& start_time_unix_ns,
                                        const py::handle& join_arg) {
  const lens::SpanGroup g = group_from_name(group);
  PerTelemetry& state = per_telemetry();
  lens::Tracer& tracer = state.tracer;
  if (!tracer.enabled(g)) return std::make_unique<PySpan>(lens::Span());
  lens::StartOptions start;
  if (kind < static_cast<int>(lens::SpanKind::kInternal) ||
      kind > static_cast<int>(lens::SpanKind::kConsumer))
    throw py::value_error("lens: span kind " + std::to_string(kind) + " is not an OTLP kind (1-5)");
  start.kind = static_cast<lens::SpanKind>(kind);
  if (parent.is_none())
    start.root = true;
  else
    start.parent = parent.cast<const lens::SpanContext&>();
  if (!join_arg.is_none()) join_step_trace(start, join_arg.cast<const PyCarrier&>());
  if (!links.is_none())
    for (const auto& item : links.cast<py::list>()) {
      const auto pair = item.cast<py::tuple>();
      start.links.push_back({pair[0].cast<const lens::SpanContext&>(),
                             pair[1].is_none() ? lens::Attributes{}
                                               : to_attributes(pair[1].cast<py::dict>())});
    }
  if (!start_time_unix_ns.is_none()) start.start_time_unix_ns = start_time_unix_ns.cast<std::int64_t>();
  return started(tracer, g, name, start, attributes);
}

}  // namespace
}  // namespace lens_python

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

  // Live metrics (docs/metrics.md): the registry, its endpoint, and the
  // live straggler rule, as in C++.
  py::class_<lens::Counter>(m, "Counter")
      .def("add", &lens::Counter::add, py::arg("delta") = 1.0)
      .def_property_readonly("value", &lens::Counter::value);
  py::class_<lens::Gauge>(m, "Gauge")
      .def("set", &lens::Gauge::set, py::arg("value"))
      .def_property_readonly("value", &lens::Gauge::value);
  py::class_<lens::Histogram>(m, "Histogram")
      .def(
          "record",
          [](lens::Histogram& h, double value, const std::optional<lens::SpanContext>& context) {
            const lens::Telemetry* t = lens::get_telemetry();
            h.record(value, context.value_or(lens::SpanContext()), t ? t->now_unix_ns() : 0);
          },
          py::arg("value"), py::arg("context") = py::none())
      .def_property_readonly("count", [](const lens::Histogram& h) { return h.snapshot().count; })
      .def_property_readonly("sum", [](const lens::Histogram& h) { return h.snapshot().sum; });
  py::class_<lens::MetricRegistry>(m, "MetricRegistry")
      .def(py::init<>())
      .def("counter", &lens::MetricRegistry::counter, py::arg("name"), py::arg("help") = "",
           py::arg("labels") = lens::MetricLabels{}, py::return_value_policy::reference_internal)
      .def("gauge", &lens::MetricRegistry::gauge, py::arg("name"), py::arg("help") = "",
           py::arg("unit") = "", py::arg("labels") = lens::MetricLabels{},
           py::return_value_policy::reference_internal)
      .def("histogram", &lens::MetricRegistry::histogram, py::arg("name"), py::arg("help"),
           py::arg("unit"), py::arg("bounds"), py::arg("labels") = lens::MetricLabels{},
           py::return_value_policy::reference_internal)
      .def("openmetrics", &lens::MetricRegistry::openmetrics);
  py::class_<lens::MetricsEndpoint>(m, "MetricsEndpoint")
      .def(py::init<const lens::MetricRegistry&, const std::string&, int>(), py::arg("registry"),
           py::arg("host") = "127.0.0.1", py::arg("port") = 0, py::keep_alive<1, 2>())
      .def_property_readonly("port", &lens::MetricsEndpoint::port)
      .def("stop", &lens::MetricsEndpoint::stop, py::call_guard<py::gil_scoped_release>());
  py::class_<lens::LiveStragglerRule>(m, "LiveStragglerRule")
      .def(py::init([](const std::vector<std::tuple<int, int, int, int>>& ranks, double threshold) {
             std::vector<lens::RankCoordinates> coords;
             for (const auto& [r, s, d, t] : ranks) coords.push_back({r, s, d, t});
             return std::make_unique<lens::LiveStragglerRule>(std::move(coords), threshold);
           }),
           py::arg("ranks"), py::arg("threshold") = 1.5)
      .def(
          "observe",
          [](lens::LiveStragglerRule& rule, std::int64_t step, const std::vector<double>& figures) {
            py::list named;
            for (const auto& s : rule.observe(step, figures)) named.append(straggler_dict(s));
            return named;
          },
          py::arg("step"), py::arg("figures"))
      .def("score", &lens::LiveStragglerRule::score, py::arg("rank"));

  // Step figures (lens/step_figures.h) and a rank's step metrics.
  m.def("set_step_figures", &lens::set_step_figures, py::arg("on"));
  m.def("step_figures_on", &lens::step_figures_on);
  m.def(
      "add_step_figure",
      [](const std::string& figure, std::int64_t ns) {
        lens::add_step_figure(figure_from_name(figure), ns);
      },
      py::arg("figure"), py::arg("ns"));
  m.def("take_step_figures", [] { return figures_to_dict(lens::take_step_figures()); });
  // The figures' names, and each group's figure where it has one
  // (default_step_figure): the package's managed_span reads the same rule.
  m.def("step_figure_names", [] {
    std::vector<std::string> names;
    for (int i = 1; i < lens::kStepFigureCount; ++i)
      names.emplace_back(lens::step_figure_name(static_cast<lens::StepFigure>(i)));
    return names;
  });
  m.def("group_step_figures", [] {
    py::dict d;
    for (int g = 0; g < lens::kSpanGroupCount; ++g) {
      const auto group = static_cast<lens::SpanGroup>(g);
      const lens::StepFigure f = lens::default_step_figure(group);
      if (f != lens::StepFigure::kNone)
        d[py::str(std::string(lens::span_group_name(group)))] =
            std::string(lens::step_figure_name(f));
    }
    return d;
  });
  py::class_<lens::StepMetrics>(m, "StepMetrics")
      .def(py::init<lens::MetricRegistry&, const lens::MetricLabels&>(), py::arg("registry"),
           py::arg("labels") = lens::MetricLabels{}, py::keep_alive<1, 2>())
      .def(
          "record_step",
          [](lens::StepMetrics& m, double seconds, const py::dict& figures,
             const std::optional<lens::SpanContext>& context) {
            const lens::Telemetry* t = lens::get_telemetry();
            m.record_step(seconds, figures_from_dict(figures),
                          context.value_or(lens::SpanContext()), t ? t->now_unix_ns() : 0);
          },
          py::arg("seconds"), py::arg("figures"), py::arg("context") = py::none())
      .def("record_spans", &lens::StepMetrics::record_spans, py::arg("ended"), py::arg("dropped"));
  py::class_<lens::OtlpMetricsExporter>(m, "OtlpMetricsExporter")
      .def("export_now", &lens::OtlpMetricsExporter::export_now,
           py::call_guard<py::gil_scoped_release>())
      .def("shutdown", &lens::OtlpMetricsExporter::shutdown,
           py::call_guard<py::gil_scoped_release>())
      .def("stats", [](const lens::OtlpMetricsExporter& e) {
        const lens::MetricsExportStats s = e.stats();
        py::dict d;
        d["requests"] = s.requests;
        d["failed"] = s.failed;
        d["last_error"] = s.last_error;
        return d;
      });
  // OTEL_METRICS_EXPORTER=otlp: an exporter of `registry` with the
  // telemetry's resource (service.name, nemo.run.id, dl.rank); else None.
  m.def(
      "metrics_exporter_from_environment",
      [](const lens::MetricRegistry& registry) -> std::unique_ptr<lens::OtlpMetricsExporter> {
        const lens::MetricsExportConfig c = lens::resolve_metrics_export();  // lens.ConfigError
        if (!c.otlp) return nullptr;
        const lens::Telemetry* t = lens::get_telemetry();
        lens::Resource resource;
        if (t) resource = t->resource();
        if (resource.find_string("service.name").empty())
          resource.set("service.name", std::string("megatron-lm"));
        const std::int64_t start = t ? t->now_unix_ns()
                                     : std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count();
        return std::make_unique<lens::OtlpMetricsExporter>(registry, std::move(resource), c.options,
                                                           c.interval, start);
      },
      py::arg("registry"), py::keep_alive<0, 1>());

  // Tail selection (docs/tail-selection.md).
  m.def("holds_steps", [] {
    const lens::Telemetry* t = lens::get_telemetry();
    return t != nullptr && t->holds_steps();
  });
  m.def(
      "hold_step",
      [](std::uint64_t step, const lens::SpanContext& context) {
        if (lens::Telemetry* t = lens::get_telemetry()) t->hold_step(step, context);
      },
      py::arg("step"), py::arg("context"));
  m.def(
      "settle_steps",
      [](const std::vector<std::uint64_t>& keep, const std::vector<std::uint64_t>& drop) {
        if (lens::Telemetry* t = lens::get_telemetry()) t->settle_steps(keep, drop);
      },
      py::arg("keep"), py::arg("drop"));
  // A span lens records for itself (Tracer::start_lens_span), a root span
  // outside whatever is current: tail selection's record of a meeting.
  m.def(
      "start_lens_span",
      [](std::string_view name, const py::dict& attributes) {
        lens::StartOptions root;
        root.root = true;
        lens::Span span = per_telemetry().tracer.start_lens_span(name, root);
        if (span.recording()) {
          PyObject *key = nullptr, *value = nullptr;
          Py_ssize_t at = 0;
          while (PyDict_Next(attributes.ptr(), &at, &key, &value))
            set_py_attribute(span, key, value);
        }
        return std::make_unique<PySpan>(std::move(span));
      },
      py::arg("name"), py::arg("attributes") = py::dict());
  py::class_<lens::TailSelector>(m, "TailSelector")
      .def(py::init<std::uint32_t, std::uint32_t, std::uint64_t>(), py::arg("keep") = 1,
           py::arg("baseline_percent") = 0, py::arg("run_key") = 0)
      .def(
          "choose",
          [](lens::TailSelector& selector, const std::vector<std::uint64_t>& steps,
             const std::vector<std::vector<double>>& seconds) {
            const lens::TailChoice c = selector.choose(steps, seconds);
            py::list kept;
            for (const auto& k : c.kept) kept.append(py::make_tuple(k.step, k.reason, k.seconds));
            py::dict d;
            d["keep"] = c.keep;
            d["drop"] = c.drop;
            d["kept"] = kept;
            return d;
          },
          py::arg("steps"), py::arg("seconds"));

  py::class_<PySpan>(m, "Span")
      .def_property_readonly("recording", &PySpan::recording)
      // Recorded and to be exported (the sampled flag of its context).
      .def_property_readonly("sampled", &PySpan::sampled)
      .def_property_readonly("context", &PySpan::context)
      .def("set_attribute", &PySpan::set_attribute, py::arg("key"), py::arg("value"))
      .def("add_event", &PySpan::add_event, py::arg("name"), py::arg("attributes") = py::dict())
      .def("add_link", &PySpan::add_link, py::arg("context"), py::arg("attributes") = py::dict())
      .def("set_status", &PySpan::set_status, py::arg("code"), py::arg("message") = "")
      .def("update_name", &PySpan::update_name, py::arg("name"))
      .def("end_at", &PySpan::end_at, py::arg("end_unix_ns"))
      .def("end", &PySpan::end);
  add_context_manager_methods(m.attr("Span"));
  for (PyMethodDef* def : {&otel_fast_start_def, &otel_fast_end_def}) {
    py::object f = py::reinterpret_steal<py::object>(PyCFunction_New(def, nullptr));
    if (!f) throw py::error_already_set();
    m.attr(def->ml_name) = f;
  }

  m.def(
      "init",
      [](std::optional<bool> enabled, std::optional<std::string> span_groups,
         std::optional<std::string> exporter, std::optional<std::string> service_name,
         std::optional<int> rank, std::optional<int> world_size,
         std::optional<std::string> trace_dir, std::optional<std::string> trace_file,
         std::optional<std::string> run_id, std::optional<double> collective_timeout,
         std::optional<std::tuple<int, int, int>> coordinates, std::optional<std::uint64_t> run_key,
         std::optional<std::string> step_context, double test_clock_offset_us,
         double test_clock_drift_ppm) {
        lens::TelemetryOptions o;
        o.step_context = step_context_option(step_context);
        o.enabled = enabled;
        o.span_groups = span_groups;
        o.exporter = exporter;
        o.service_name = service_name;
        o.rank = rank;
        o.world_size = world_size;
        o.trace_dir = trace_dir;
        o.trace_file = trace_file;
        o.run_id = run_id;
        if (collective_timeout) o.collective_timeout = to_ms(*collective_timeout);
        if (coordinates) {
          const auto [pp, dp, tp] = *coordinates;
          o.coordinates = {pp, dp, tp};
        }
        o.run_key = run_key;
        // The clock test aid (config.h): off unless a test sets it.
        o.test_clock_offset_ns = static_cast<std::int64_t>(test_clock_offset_us * 1e3);
        o.test_clock_drift_ppm = test_clock_drift_ppm;
        py::gil_scoped_release release;
        return lens::init(o) != nullptr;
      },
      py::kw_only(), py::arg("enabled") = py::none(), py::arg("span_groups") = py::none(),
      py::arg("exporter") = py::none(), py::arg("service_name") = py::none(),
      py::arg("rank") = py::none(), py::arg("world_size") = py::none(),
      py::arg("trace_dir") = py::none(), py::arg("trace_file") = py::none(),
      py::arg("run_id") = py::none(), py::arg("collective_timeout") = py::none(),
      py::arg("coordinates") = py::none(), py::arg("run_key") = py::none(),
      py::arg("step_context") = py::none(), py::arg("test_clock_offset_us") = 0.0,
      py::arg("test_clock_drift_ppm") = 0.0);

  // The start-up agreement's record for this process (lens.distributed.init
  // all-gathers it): the settings resolved from the same options and
  // environment as init, or, when they do not resolve, the mark of a rank
  // that could not read its configuration, with the error to raise after the
  // exchange. The comparison is compare_startup_records, as in C++.
  m.def(
      "startup_record",
      [](int pipeline_parallel_size, std::optional<bool> enabled,
         std::optional<std::string> span_groups, std::optional<std::string> run_id,
         std::optional<std::string> step_context) {
        lens::TelemetryOptions o;
        o.enabled = enabled;
        o.span_groups = span_groups;
        o.run_id = run_id;
        std::string error;
        std::vector<std::uint8_t> record;
        try {
          o.step_context = step_context_option(step_context);
          const lens::Config c = lens::resolve_config(o, lens::process_environment());
          record = lens::startup_record(&c, pipeline_parallel_size);
        } catch (const lens::ConfigError& e) {
          error = e.what();
          record = lens::startup_record(nullptr, pipeline_parallel_size);
        }
        return py::make_tuple(
            py::bytes(reinterpret_cast<const char*>(record.data()), record.size()), error);
      },
      py::arg("pipeline_parallel_size"), py::kw_only(), py::arg("enabled") = py::none(),
      py::arg("span_groups") = py::none(), py::arg("run_id") = py::none(),
      py::arg("step_context") = py::none());
  m.def(
      "compare_startup_records",
      [](int my_rank, const std::vector<py::bytes>& records) {
        std::string all;
        for (const auto& r : records) all += std::string(r);
        const lens::StartupAgreement agreed = lens::compare_startup_records(
            my_rank, std::span(reinterpret_cast<const std::uint8_t*>(all.data()), all.size()));
        return py::make_tuple(agreed.run_id, agreed.run_key);
      },
      py::arg("my_rank"), py::arg("records"));

  m.def(
      "compare_telemetry_start",
      [](int my_rank, const std::vector<bool>& failed) {
        std::vector<std::uint8_t> statuses(failed.begin(), failed.end());
        lens::compare_telemetry_start(my_rank, statuses);
      },
      py::arg("my_rank"), py::arg("failed"));

  bind_steps(m);
  m.def("is_initialized", [] { return lens::get_telemetry() != nullptr; });
  m.def("group_names", [] {
    std::vector<std::string> names;
    for (int i = 0; i < lens::kSpanGroupCount; ++i)
      names.emplace_back(lens::span_group_name(static_cast<lens::SpanGroup>(i)));
    return names;
  });
  m.def("enabled_groups", [] {
    std::vector<std::string> names;
    if (lens::Telemetry* t = lens::get_telemetry())
      for (int i = 0; i < lens::kSpanGroupCount; ++i)
        if (t->enabled(static_cast<lens::SpanGroup>(i)))
          names.emplace_back(lens::span_group_name(static_cast<lens::SpanGroup>(i)));
    return names;
  });
  m.def("set_span_groups", [](const std::string& spec) {
    lens::Telemetry* t = lens::get_telemetry();
    if (!t) throw std::runtime_error("lens: telemetry is not initialised");
    t->set_span_groups(lens::SpanGroupSet::parse(spec, "set_span_groups"));
  });
  m.def("trace_file", [] {
    lens::Telemetry* t = lens::get_telemetry();
    return t ? t->trace_file() : std::string();
  });
  m.def("config", [] {
    py::dict d;
    lens::Telemetry* t = lens::get_telemetry();
    if (!t) return d;
    const lens::Config& c = t->config();
    d["exporter"] = c.exporter;
    d["service_name"] = c.service_name;
    d["run_id"] = c.run_id;
    d["span_groups"] = c.span_groups.to_spec();
    d["collective_timeout"] = static_cast<double>(c.collective_timeout.count()) / 1000.0;
    d["clock_sync"] = c.clock_sync;
    d["step_context"] = std::string(lens::step_context_mode_name(c.step_context));
    d["step_verify_steps"] = c.step_verify_steps;
    d["tail_selection"] = c.tail_selection;
    d["tail_keep"] = c.tail_keep;
    d["tail_baseline_percent"] = c.tail_baseline_percent;
    d["run_key"] = c.run_key;
    d["trace_scope"] = std::string(lens::trace_scope_name(c.trace_scope));
    d["rank"] = c.rank ? py::int_(*c.rank) : py::object(py::none());
    d["world_size"] = c.world_size ? py::int_(*c.world_size) : py::object(py::none());
    return d;
  });

  m.def("start_otel_span", &start_otel_span, py::arg("name"), py::arg("group"),
        py::arg("parent"), py::arg("kind"), py::arg("attributes"), py::arg("links"),
        py::arg("start_time_unix_ns"), py::arg("join"));
  m.def("start_span", &start_span, py::arg("name"), py::arg("group"),
        py::arg("attributes") = py::dict(), py::arg("join") = py::none(),
        py::arg("stream") = py::none(), py::arg("figure") = py::none());
  m.def("current_span_context", [] {
    const lens::SpanContext c = lens::current_span_context();
    return c.valid() ? std::optional<lens::SpanContext>(c) : std::nullopt;
  });
  m.def(
      "create_linked_span",
      [](const std::string& name, const std::optional<PyCarrier>& remote,
         const py::dict& attributes) {
        return std::make_unique<PySpan>(lens::create_linked_span(
            per_telemetry().tracer, name, unwrap(remote), to_attributes(attributes)));
      },
      py::arg("name"), py::arg("remote_carrier"), py::arg("attributes") = py::dict());

  m.def(
      "reserve_step_carrier",
      [](std::uint64_t step) {
        // As StepScope does on a source rank (step_trace.h).
        lens::Telemetry* t = step_telemetry();
        const lens::Config& cfg = t->config();
        PyCarrier c;
        c.reserved_at_unix_ns = t->now_unix_ns();
        c.carrier = lens::reserve_step_context(*t, cfg.trace_scope, cfg.rank.value_or(0), step,
                                               per_telemetry().budget);
        c.reserved_here = true;
        return c;
      },
      py::arg("step"));
  m.def(
      "derive_step_carrier",
      [](std::uint64_t step, bool reserved_here, std::optional<int> pipeline_source) {
        // As StepScope does in derived mode (step_trace.h).
        lens::Telemetry* t = step_telemetry();
        const lens::Config& cfg = t->config();
        PyCarrier c;
        c.carrier = lens::derive_step_context(*t, cfg.trace_scope, step, per_telemetry().budget,
                                              pipeline_source);
        c.reserved_here = reserved_here;
        return c;
      },
      py::arg("step"), py::arg("reserved_here"), py::arg("pipeline_source") = py::none());
  m.def("step_check_due", [] {
    lens::Telemetry* t = lens::get_telemetry();
    if (!t) return false;
    lens::step_check_interval(t->config(), t->config().trace_scope);  // throws what cannot work
    return per_telemetry().checks.due();
  });
  m.def(
      "step_check_record",
      [](std::uint64_t step, const std::optional<PyCarrier>& derived, int check_rank,
         std::optional<int> pipeline_source) {
        lens::Telemetry* t = lens::get_telemetry();
        if (!t) throw std::runtime_error("lens: telemetry is not initialised");
        const lens::Config& cfg = t->config();
        PerTelemetry& state = per_telemetry();
        const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count();
        const bool per_pipeline = derived && cfg.trace_scope == lens::TraceScope::kPipeline;
        const auto record = lens::encode_step_check(state.checks.record(
            step, unwrap(derived), per_pipeline ? pipeline_source : std::nullopt, check_rank,
            state.budget, now));
        return py::bytes(reinterpret_cast<const char*>(record.data()), record.size());
      },
      py::arg("step"), py::arg("derived"), py::arg("check_rank"),
      py::arg("pipeline_source") = py::none());
  m.def(
      "accept_step_checks",
      [](int my_rank, const py::bytes& records) {
        const std::string_view bytes = records;
        const auto all = lens::compare_step_checks(
            my_rank, std::span<const std::uint8_t>(
                         reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()));
        lens::StepCheckSchedule::accept(all, per_telemetry().budget);
      },
      py::arg("my_rank"), py::arg("records"));
  m.def("step_opened", [] {
    if (lens::get_telemetry()) per_telemetry().checks.opened();
  });
  m.def(
      "anchor_step_context",
      [](std::uint64_t step) -> std::optional<lens::SpanContext> {
        const lens::Telemetry* t = lens::get_telemetry();
        if (!t) return std::nullopt;
        return lens::anchor_step_context(t->config().run_key, t->config().run_id, step);
      },
      py::arg("step"));
  m.attr("FRAME_BYTES") = lens::kCarrierFrameBytes;
  m.def(
      "encode_carrier",
      [](const std::optional<PyCarrier>& c) {
        const lens::CarrierFrame frame = lens::encode_carrier(unwrap(c));
        return py::bytes(reinterpret_cast<const char*>(frame.data()), frame.size());
      },
      py::arg("carrier"));
  m.def(
      "accept_carrier_frame",
      [](const py::bytes& frame, std::optional<std::uint64_t> expected_step, bool reserved_here,
         const std::optional<PyCarrier>& reserved) -> std::optional<PyCarrier> {
        const std::string_view bytes = frame;
        auto c = lens::accept_carrier_frame(
            std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                          bytes.size()),
            expected_step);
        if (!c) return std::nullopt;
        PyCarrier accepted{*c, reserved_here, std::nullopt};
        // The source's own reservation: its step span starts when it was made.
        if (reserved_here && reserved) accepted.reserved_at_unix_ns = reserved->reserved_at_unix_ns;
        return accepted;
      },
      py::arg("frame"), py::arg("expected_step") = py::none(), py::arg("reserved_here") = false,
      py::arg("reserved") = py::none());
  m.def(
      "start_job_span",
      [](int rank, const py::dict& attributes) {
        // As the trainer's (step_context.h): every rank's job span in the
        // job's one trace, rank 0's the one the others link to; the step
        // spans started after it link to it.
        lens::Telemetry* t = lens::get_telemetry();
        PerTelemetry& state = per_telemetry();
        if (t == nullptr || !state.tracer.enabled(lens::SpanGroup::kJob))
          return std::make_unique<PySpan>(lens::Span());
        lens::Span job = state.tracer.start_span(lens::SpanGroup::kJob, lens::semconv::kJobSpan,
                                                 lens::job_span_start(*t, rank));
        set_py_attributes(job, attributes);
        // Only a span that is exported: a link to a dropped one would dangle.
        if (job.recording() && job.context().sampled()) state.job = job.context();
        return std::make_unique<PySpan>(std::move(job));
      },
      py::arg("rank"), py::arg("attributes") = py::dict());
  m.def("set_pp_trace_carrier",
        [](const std::optional<PyCarrier>& c) { lens::set_pp_trace_carrier(unwrap(c)); });
  m.def("get_pp_trace_carrier", []() -> std::optional<PyCarrier> {
    auto c = lens::get_pp_trace_carrier();
    if (!c) return std::nullopt;
    return PyCarrier{*c, false, std::nullopt};
  });
  m.def("pipeline_stats", [] {
    const lens::PipelineStats s = lens::pipeline_stats();
    py::dict d;
    d["broadcasts"] = s.broadcasts;
    d["frames_malformed"] = s.frames_malformed;
    d["frames_without_context"] = s.frames_without_context;
    d["step_mismatches"] = s.step_mismatches;
    d["linked_spans"] = s.linked_spans;
    d["linked_spans_without_link"] = s.linked_spans_without_link;
    d["derived_steps"] = s.derived_steps;
    d["step_checks"] = s.step_checks;
    return d;
  });

  m.def(
      "clock_sync_due",
      [](std::uint64_t step) {
        PerTelemetry& state = per_telemetry();
        return !state.clock || state.clock->due(step);
      },
      py::arg("step"));
  m.def(
      "sync_clocks",
      [](py::function send, py::function recv, int rank, int size, const std::string& engine,
         std::optional<std::uint64_t> step) {
        lens::Telemetry* t = lens::get_telemetry();
        if (!t) throw std::runtime_error("lens: telemetry is not initialised");
        PerTelemetry& state = per_telemetry();
        if (!state.clock) {
          state.clock_engine = std::make_unique<PythonPointToPoint>(rank, size, engine);
          state.clock = std::make_unique<lens::ClockSchedule>(*t, *state.clock_engine, state.tracer,
                                                              t->config().collective_timeout);
        }
        PythonPointToPoint::Use use(*state.clock_engine, std::move(send), std::move(recv));
        state.clock->sync(step);
      },
      py::arg("send"), py::arg("recv"), py::arg("rank"), py::arg("size"), py::arg("engine"),
      py::arg("step") = py::none());
  m.def("write_failure_record", [](const std::string& who, const std::string& detail) {
    if (lens::Telemetry* t = lens::get_telemetry()) lens::write_failure_record(*t, who, detail);
  });
  m.def(
      "flush",
      [](double timeout) {
        const auto ms = to_ms(timeout);
        lens::Telemetry* t = lens::get_telemetry();
        if (!t) return true;
        py::gil_scoped_release release;
        return t->flush(ms);
      },
      py::arg("timeout") = 30.0);
  m.def(
      "shutdown",
      [](std::optional<double> timeout) {
        // None: the configured bound (OTEL_BSP_EXPORT_TIMEOUT).
        lens::Telemetry* t = lens::get_telemetry();
        const auto ms = timeout ? to_ms(*timeout)
                        : t && t->config().batch.export_timeout.count() > 0
                            ? t->config().batch.export_timeout
                            : std::chrono::milliseconds(30000);
        py::gil_scoped_release release;
        return lens::shutdown_telemetry(ms);
      },
      py::arg("timeout") = py::none());
  m.def(
      "watch_termination",
      [](const std::string& then, const std::vector<int>& signals,
         std::optional<double> shutdown_timeout) {
        lens::TerminationOptions w;
        if (then == "exit")
          w.then = lens::OnTermination::kExit;
        else if (then == "continue")
          w.then = lens::OnTermination::kContinue;
        else
          throw py::value_error("lens: watch_termination(then=" + then +
                                "): accepted: \"exit\" or \"continue\"");
        w.signals = signals;
        if (shutdown_timeout) w.shutdown_timeout = to_ms(*shutdown_timeout);
        return lens::watch_termination(w);
      },
      py::arg("then") = "exit", py::arg("signals") = std::vector<int>{},
      py::arg("shutdown_timeout") = py::none());
  m.def("unwatch_termination", &lens::unwatch_termination);
  m.def("termination_signal", &lens::termination_signal);
  m.def("signal_name", &lens::signal_name, py::arg("signo"));
  m.def("stats", [] {
    py::dict d;
    lens::Telemetry* t = lens::get_telemetry();
    if (!t) return d;
    const lens::TelemetryStats s = t->stats();
    d["queued"] = s.processor.queued;
    d["exported"] = s.processor.exported;
    d["spooled"] = s.processor.spooled;
    d["export_failed"] = s.processor.export_failed;
    d["dropped_queue_full"] = s.processor.dropped_queue_full;
    d["dropped_at_shutdown"] = s.processor.dropped_at_shutdown;
    d["truncated"] = s.spans_truncated;
    // Where every span went, in the end-of-run report's words.
    d["account"] = lens::SpanAccount::of(s).describe();
    if (s.device) {
      py::dict dev;
      dev["runtime"] = s.device->runtime;
      dev["timed"] = s.device->timed;
      dev["host_timed"] = s.device->host_timed;
      dev["resolved"] = s.device->resolved;
      dev["refused"] = s.device->refused;
      dev["unresolved"] = s.device->unresolved;
      dev["pending_high_water"] = s.device->pending_high_water;
      dev["anchor_failures"] = s.device->anchor_failures;
      dev["anchors"] = s.device->anchors;
      dev["drift"] = s.device->drift;
      dev["uncertainty_ns"] = s.device->uncertainty_ns;
      dev["resolver_cpu_ns"] = s.device->resolver_cpu_ns;
      d["device"] = dev;
    }
    d["not_selected"] = s.processor.not_selected;
    d["dropped_hold_full"] = s.processor.dropped_hold_full;
    if (s.hold) {
      py::dict h;
      h["steps_held"] = s.hold->steps_held;
      h["steps_kept"] = s.hold->steps_kept;
      h["steps_not_selected"] = s.hold->steps_not_selected;
      h["steps_refused"] = s.hold->steps_refused;
      h["steps_over_bytes"] = s.hold->steps_over_bytes;
      h["steps_undecided"] = s.hold->steps_undecided;
      h["spans_kept"] = s.hold->spans_kept;
      h["spans_not_selected"] = s.hold->spans_not_selected;
      h["spans_no_room"] = s.hold->spans_no_room;
      h["bytes_peak"] = s.hold->bytes_peak;
      d["hold"] = h;
    }
    return d;
  });
}
