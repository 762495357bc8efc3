// lens._lens's spans: lens.Span (its `with` protocol as plain CPython
// methods), lens.managed_span's and lens.otel's starts (with lens.otel's
// common start and end in C), the span groups, and linked receives.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bindings.h"
#include "lens/linked_span.h"
#include "lens/span_groups.h"
#include "lens/step_context.h"
#include "lens/step_figures.h"
#include "lens/telemetry.h"

namespace lens_python {
namespace {

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

void add_context_manager_methods(const py::object& cls) {
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  for (PyMethodDef* def : {&span_enter_def, &span_exit_def}) {
    py::object method = py::reinterpret_steal<py::object>(PyDescr_NewMethod(type, def));
    if (!method) throw py::error_already_set();
    cls.attr(def->ml_name) = method;
  }
}

// A str's UTF-8 bytes without a copy (CPython caches them in the object).
std::string_view utf8_view(PyObject* s) {
  Py_ssize_t n = 0;
  const char* data = PyUnicode_AsUTF8AndSize(s, &n);
  if (data == nullptr) throw py::error_already_set();
  return {data, static_cast<std::size_t>(n)};
}

}  // namespace

void record_exception(lens::Span& span, const py::handle& type, const py::handle& value) {
  if (!span.recording()) return;
  const std::string message = py::str(value);
  span.add_event("exception", {{"exception.type", std::string(py::str(type.attr("__qualname__")))},
                               {"exception.message", message}});
  span.set_status(lens::StatusCode::kError, message);
}

// lens.otel's conversion of a key and value as the SDK converts them at a
// span's start (otel.py, _start_pair), registered by lens.otel when it is
// imported: one rule for both of its start paths. Without it (lens.otel not
// imported), the key through str() and the value through to_value.
PyObject* g_attribute_cleaner = nullptr;  // a strong reference, kept for the process

namespace {

// What neither the common case below nor the cleaner took.
void set_converted(lens::Span& span, PyObject* key, PyObject* value) {
  if (g_attribute_cleaner == nullptr) {
    span.set_attribute(std::string(py::str(key)), to_value(value));
    return;
  }
  py::object pair = py::reinterpret_steal<py::object>(
      PyObject_CallFunctionObjArgs(g_attribute_cleaner, key, value, nullptr));
  if (!pair) throw py::error_already_set();
  if (pair.is_none()) return;  // dropped, with the API's warning
  const auto t = pair.cast<py::tuple>();
  span.set_attribute(t[0].cast<std::string>(), to_value(t[1]));
}

}  // namespace

// Sets one attribute from Python, with no copy of the key and no variant
// for the common scalar types (exact bool, int, float, str, valid UTF-8);
// None is not set (as the SDK); anything else as set_converted says.
void set_py_attribute(lens::Span& span, PyObject* key, PyObject* value) {
  if (value == Py_None) return;
  Py_ssize_t n = 0;
  const char* data = PyUnicode_CheckExact(key) ? PyUnicode_AsUTF8AndSize(key, &n) : nullptr;
  if (data != nullptr && n > 0) {
    const std::string_view k(data, static_cast<std::size_t>(n));
    if (PyBool_Check(value)) {
      span.set_attribute(k, value == Py_True);
      return;
    }
    if (PyLong_CheckExact(value)) {
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
      if (overflow == 0 && !(v == -1 && PyErr_Occurred())) {
        span.set_attribute(k, static_cast<std::int64_t>(v));
        return;
      }
      PyErr_Clear();
    } else if (PyFloat_CheckExact(value)) {
      span.set_attribute(k, PyFloat_AS_DOUBLE(value));
      return;
    } else if (PyUnicode_CheckExact(value)) {
      Py_ssize_t m = 0;
      if (const char* v = PyUnicode_AsUTF8AndSize(value, &m)) {
        span.set_attribute(k, std::string_view(v, static_cast<std::size_t>(m)));
        return;
      }
    }
  }
  PyErr_Clear();  // a lone surrogate's encoding error: set_converted replaces it
  set_converted(span, key, value);
}

// Sets a dict's attributes on a span.
void set_py_attributes(lens::Span& span, const py::dict& attributes) {
  PyObject *key = nullptr, *value = nullptr;
  Py_ssize_t at = 0;
  while (PyDict_Next(attributes.ptr(), &at, &key, &value)) set_py_attribute(span, key, value);
}

namespace {

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

// A CUDA stream's handle given as an int >= 0 (what torch.cuda.Stream's
// cuda_stream is); ValueError otherwise.
void* stream_of(const py::handle& stream) {
  if (!py::isinstance<py::int_>(stream) || stream.cast<py::int_>() < py::int_(0))
    throw py::value_error("lens: stream must be a CUDA stream's handle (an int >= 0)");
  return reinterpret_cast<void*>(stream.cast<std::uintptr_t>());
}

// lens.otel's common start and end in C (otel.py, _CurrentSpan): a span
// of `group` named `name`, child of the API's current span when that is a
// lens.otel.Span (a root when there is none), its attributes set, made the
// current span in a new API Context set on the API's ContextVar. Returns
// (span, token), or None where the Python path must decide (the group off,
// a foreign or unsampled parent, a span sampled out). The span is a
// `span_type` made without __init__: its class defaults, and _native.
// args: name, group, attributes (dict), the ContextVar, the span key, the
// Span type, the Context type, and the CUDA stream to time it on (its handle
// as an int >= 0) or None.
PyObject* otel_fast_start(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 8) {
    PyErr_SetString(PyExc_TypeError, "otel_fast_start takes 8 arguments");
    return nullptr;
  }
  // A name that is not a str, attributes that are a Mapping but no dict:
  // the Python path converts them (otel.py).
  if (!PyUnicode_CheckExact(args[0]) || (args[2] != Py_None && !PyDict_Check(args[2])))
    Py_RETURN_NONE;
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
    if (args[7] != Py_None) start.device_stream = stream_of(py::reinterpret_borrow<py::object>(args[7]));
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
  // A token of another context (a generator resumed in another thread or
  // context) cannot be reset: as the API's detach, that is reported, not
  // raised, and the span still ends. False tells the caller to log it.
  const bool detached = PyContextVar_Reset(args[0], args[1]) == 0;
  if (!detached) PyErr_Clear();
  return translating([&]() -> PyObject* {
    PyObject* native = PyObject_GetAttr(args[2], native_name());
    if (native == nullptr) return nullptr;
    py::object holder = py::reinterpret_steal<py::object>(native);
    if (PyObject_SetAttr(args[2], ended_name(), Py_True) < 0) return nullptr;
    holder.cast<PySpan&>().end();
    if (detached) Py_RETURN_NONE;
    Py_RETURN_FALSE;
  });
}

PyMethodDef otel_fast_start_def{
    "otel_fast_start", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(otel_fast_start)),
    METH_FASTCALL, "lens.otel's common span start (otel.py)."};
PyMethodDef otel_fast_end_def{
    "otel_fast_end", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(otel_fast_end)),
    METH_FASTCALL, "lens.otel's common span end (otel.py)."};

// lens.managed_span's span: child of this thread's current lens span, a
// step span linked to the job span, joining the step's trace with `join`.
// `join` is a lens.Carrier or None; taken as a handle, since pybind's
// conversion of None to a null pointer first tries the None as a Carrier
// (an AttributeError formatted and dropped on every call).
// `stream` is None or a CUDA stream's handle as an int (what
// torch.cuda.Stream.cuda_stream gives): the span is then timed on the device.
// `figure` names the step figure it counts toward (None: its group's).
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
  if (!stream.is_none()) start.device_stream = stream_of(stream);
  if (g == lens::SpanGroup::kStep && state.job)
    start.links.push_back({*state.job, {{"lens.link", std::string("job")}}});
  if (join) join_step_trace(start, *join);
  return started(tracer, g, name, start, attributes);
}

// A span of the OpenTelemetry API provider (lens.otel): its parent given
// (the API's context decides it, not this thread's current lens span), or
// none for a root; its kind, links and start time as the API passes them;
// timed on the device when `stream` is a CUDA stream's handle (lens.otel
// passes the current stream for the compute spans of a process using CUDA).
// Group off or no telemetry: a span that is not recorded.
std::unique_ptr<PySpan> start_otel_span(std::string_view name, std::string_view group,
                                        const py::handle& parent, int kind,
                                        const py::dict& attributes, const py::handle& links,
                                        const py::handle& start_time_unix_ns,
                                        const py::handle& join_arg, const py::handle& stream) {
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
  if (!stream.is_none()) start.device_stream = stream_of(stream);
  return started(tracer, g, name, start, attributes);
}

}  // namespace

void bind_spans(py::module_& m) {
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
  m.def("set_attribute_cleaner", [](const py::object& cleaner) {
    Py_XDECREF(g_attribute_cleaner);
    g_attribute_cleaner = cleaner.is_none() ? nullptr : cleaner.inc_ref().ptr();
  });
  m.def("start_otel_span", &start_otel_span, py::arg("name"), py::arg("group"),
        py::arg("parent"), py::arg("kind"), py::arg("attributes"), py::arg("links"),
        py::arg("start_time_unix_ns"), py::arg("join"), py::arg("stream") = py::none());
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

}

}  // namespace lens_python
