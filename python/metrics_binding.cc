// lens._lens's live metrics (docs/metrics.md): the registry, its endpoint
// and OTLP exporter, the live straggler rule, the step figures and a rank's
// step metrics, as in C++.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "lens/live_stragglers.h"
#include "lens/metrics.h"
#include "lens/metrics_endpoint.h"
#include "lens/metrics_exporter.h"
#include "lens/span_groups.h"
#include "lens/step_figures.h"
#include "lens/step_metrics.h"
#include "lens/telemetry.h"

namespace lens_python {

// A step figure by its name ("compute", "p2p_wait", ...): ValueError for another.
lens::StepFigure figure_from_name(std::string_view name) {
  for (int i = 1; i < lens::kStepFigureCount; ++i) {
    const auto f = static_cast<lens::StepFigure>(i);
    if (lens::step_figure_name(f) == name) return f;
  }
  throw py::value_error("lens: unknown step figure '" + std::string(name) +
                        "' (valid: compute, p2p_wait, p2p_send, all_reduce, optimizer)");
}

py::dict straggler_dict(const lens::LiveStraggler& s) {
  py::dict d;
  d["rank"] = s.who.rank;
  d["stage"] = s.who.stage;
  d["replica"] = s.who.replica;
  d["tensor"] = s.who.tensor;
  d["step"] = s.step;
  d["factor"] = s.factor;
  d["against_peers"] = s.against_peers;
  d["line"] = s.describe();
  return d;
}

namespace {

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

}  // namespace

void bind_metrics(py::module_& m) {
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
}

}  // namespace lens_python
