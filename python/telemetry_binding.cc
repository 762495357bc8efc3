// lens._lens's telemetry: init and shutdown, the start-up agreement's
// records, the resolved settings, failure records, the termination watch
// and the end-of-run statistics.
#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "bindings.h"
#include "lens/config.h"
#include "lens/error.h"
#include "lens/settings.h"
#include "lens/startup_agreement.h"
#include "lens/step_context.h"
#include "lens/telemetry.h"
#include "lens/termination.h"

namespace lens_python {
namespace {

// A keyword's value as the settings table takes it.
lens::SettingValue setting_value(const std::string& name, const py::handle& value) {
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) {
    try {
      return value.cast<std::int64_t>();
    } catch (const py::cast_error&) {
      throw lens::ConfigError(name + "=" + std::string(py::repr(value)) +
                              " is not valid; accepted: an integer of 64 bits");
    }
  }
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  throw lens::ConfigError(name + "=" + std::string(py::repr(value)) +
                          " is not valid; accepted: a bool, an int, a float or a str");
}

// lens.init's keywords as options: each a row of the settings table
// (lens/settings.h), but for what only code gives (coordinates, the run key,
// the clock test aid). None leaves a setting to its variable. An unknown
// keyword is a TypeError naming those accepted.
lens::TelemetryOptions options_from(const py::kwargs& keywords) {
  lens::TelemetryOptions o;
  for (const auto& [key, value] : keywords) {
    const std::string name = py::str(key);
    if (value.is_none()) continue;
    if (name == "coordinates") {
      const auto [pp, dp, tp] = value.cast<std::tuple<int, int, int>>();
      o.coordinates = {pp, dp, tp};
    } else if (name == "run_key") {
      o.run_key = value.cast<std::uint64_t>();
    } else if (name == "test_clock_offset_us") {
      // The clock test aid (config.h): off unless a test sets it.
      o.test_clock_offset_ns = static_cast<std::int64_t>(value.cast<double>() * 1e3);
    } else if (name == "test_clock_drift_ppm") {
      o.test_clock_drift_ppm = value.cast<double>();
    } else if (name == "resource_attributes") {
      // Added to (and overriding) OTEL_RESOURCE_ATTRIBUTES: what a caller's
      // resource says (lens.otel: a provider's Resource, Megatron's layout).
      if (!py::isinstance<py::dict>(value))
        throw lens::ConfigError("resource_attributes=" + std::string(py::repr(value)) +
                                " is not valid; accepted: a dict of attributes");
      o.resource_attributes = to_attributes(value.cast<py::dict>());
    } else if (const lens::SettingRow* row = lens::find_setting(name); row && row->give) {
      row->give(*row, o, setting_value(name, value));
    } else {
      std::string accepted =
          "coordinates, run_key, resource_attributes, test_clock_offset_us, test_clock_drift_ppm";
      for (const lens::SettingRow& r : lens::setting_rows())
        if (r.give) accepted += ", " + std::string(r.option);
      throw py::type_error("lens.init() got an unexpected keyword argument '" + name +
                           "'; accepted: " + accepted);
    }
  }
  return o;
}

py::object to_python(const lens::SettingValue& v) {
  if (const auto* b = std::get_if<bool>(&v)) return py::bool_(*b);
  if (const auto* n = std::get_if<std::int64_t>(&v)) return py::int_(*n);
  if (const auto* d = std::get_if<double>(&v)) return py::float_(*d);
  if (const auto* t = std::get_if<std::string>(&v)) return py::str(*t);
  return py::none();
}

std::string_view kind_name(lens::SettingKind kind) {
  switch (kind) {
    case lens::SettingKind::kFlag: return "flag";
    case lens::SettingKind::kCount: return "count";
    case lens::SettingKind::kMillis: return "seconds";
    case lens::SettingKind::kChoice: return "choice";
    case lens::SettingKind::kText: return "text";
    case lens::SettingKind::kComposite: return "composite";
  }
  return "";
}

}  // namespace

void bind_telemetry(py::module_& m) {
  m.def("init", [](const py::kwargs& keywords) {
    const lens::TelemetryOptions o = options_from(keywords);
    py::gil_scoped_release release;
    return lens::init(o) != nullptr;
  });

  // The settings table: each row's keyword (None: a variable only), the
  // variables it is read from, its kind, what it accepts, whether the ranks
  // agree on it at start-up.
  m.def("settings", [] {
    py::list rows;
    for (const lens::SettingRow& r : lens::setting_rows()) {
      py::dict d;
      d["option"] = r.give ? py::object(py::str(std::string(r.option))) : py::object(py::none());
      py::list variables;
      for (std::string_view v : r.variable_names()) variables.append(std::string(v));
      d["variables"] = variables;
      d["kind"] = std::string(kind_name(r.kind));
      d["accepted"] = r.kind == lens::SettingKind::kCount || r.kind == lens::SettingKind::kMillis
                          ? std::to_string(r.lo) + " to " + std::to_string(r.hi)
                          : std::string(r.accepted);
      d["job_wide"] = r.job_wide;
      rows.append(d);
    }
    return rows;
  });

  // The start-up agreement's record for this process (lens.distributed.init
  // all-gathers it): the settings resolved from the same options (lens.init's
  // keywords) and environment as init, or, when they do not resolve, the
  // mark of a rank that could not read its configuration, with the error to
  // raise after the exchange. The comparison is compare_startup_records, as
  // in C++.
  m.def("startup_record", [](int pipeline_parallel_size, const py::kwargs& keywords) {
    std::string error;
    std::vector<std::uint8_t> record;
    try {
      const lens::Config c = lens::resolve_config(options_from(keywords), lens::process_environment());
      record = lens::startup_record(&c, pipeline_parallel_size);
    } catch (const std::exception& e) {
      error = e.what();
      record = lens::startup_record(nullptr, pipeline_parallel_size);
    }
    return py::make_tuple(py::bytes(reinterpret_cast<const char*>(record.data()), record.size()),
                          error);
  });
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

  m.def("is_initialized", [] { return lens::get_telemetry() != nullptr; });
  m.def("trace_file", [] {
    lens::Telemetry* t = lens::get_telemetry();
    return t ? t->trace_file() : std::string();
  });
  // The resolved settings: every row the table shows, by its option, and the
  // run key.
  m.def("config", [] {
    py::dict d;
    lens::Telemetry* t = lens::get_telemetry();
    if (!t) return d;
    const lens::Config& c = t->config();
    for (const lens::SettingRow& r : lens::setting_rows())
      if (r.shown) d[py::str(std::string(r.option))] = to_python(r.shown(r, c));
    d["run_key"] = c.run_key;
    return d;
  });

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

}  // namespace lens_python
