// lens._lens's telemetry: init and shutdown, the start-up agreement's
// records, the resolved settings, failure records, the termination watch
// and the end-of-run statistics.
#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "lens/config.h"
#include "lens/error.h"
#include "lens/startup_agreement.h"
#include "lens/step_context.h"
#include "lens/telemetry.h"
#include "lens/termination.h"

namespace lens_python {
namespace {

// step_context= as lens.init takes it: "broadcast" or "derived".
std::optional<lens::StepContextMode> step_context_option(const std::optional<std::string>& v) {
  if (!v) return std::nullopt;
  if (*v == "broadcast") return lens::StepContextMode::kBroadcast;
  if (*v == "derived") return lens::StepContextMode::kDerived;
  throw lens::ConfigError("step_context='" + *v + "' is not valid; accepted: broadcast, derived");
}

}  // namespace

void bind_telemetry(py::module_& m) {
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

  m.def("is_initialized", [] { return lens::get_telemetry() != nullptr; });
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
