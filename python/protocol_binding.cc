// lens._lens's step protocol one call at a time (lens.distributed's
// lower-level functions, nemo-lens's call shapes): step contexts reserved,
// derived and checked, carrier frames, the carrier slot, the job span, clock
// samples and tail selection's pieces. lens.distributed.StepTrace runs the
// whole protocol instead (step_binding.cc).
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bindings.h"
#include "lens/broadcast_trace_context.h"
#include "lens/carrier.h"
#include "lens/carrier_slot.h"
#include "lens/clock_schedule.h"
#include "lens/communicator.h"
#include "lens/error.h"
#include "lens/pipeline_stats.h"
#include "lens/semconv.h"
#include "lens/step_check.h"
#include "lens/step_context.h"
#include "lens/tail_selection.h"
#include "lens/telemetry.h"

namespace lens_python {

PerTelemetry& per_telemetry() {
  static PerTelemetry state;
  lens::Telemetry* t = lens::get_telemetry();
  const std::uint64_t instance = t ? t->instance() : 0;
  if (instance != state.owner) {
    state.tracer = t ? t->tracer(lens::kDefaultTracerName) : lens::Tracer();
    // As StepTrace does (step_context.h): a shared budget where more than
    // one rank decides a step, and the step checks that renew it. A setting
    // that cannot work is raised by step_context, at the first step.
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

namespace {

// The telemetry a step's context is made with; refuses pipeline scope
// without its settings, as StepTrace does.
lens::Telemetry* step_telemetry() {
  lens::Telemetry* t = lens::get_telemetry();
  if (!t) throw std::runtime_error("lens: telemetry is not initialised");
  if (t->config().trace_scope == lens::TraceScope::kPipeline)
    lens::require_pipeline_scope_settings(t->config());
  return t;
}

}  // namespace

void bind_protocol(py::module_& m) {
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
  // One step's context the way lens.distributed.broadcast_trace_context and
  // step_trace_context give it, the protocol's pieces in their order here
  // rather than in Python: derived (no collective), or reserved on the
  // source and broadcast over `group` (a _TorchGroup) from its rank `src`;
  // then, when one is due, the step check over `check_group`. A failed
  // collective or check leaves a failure record and raises lens.CommError
  // (a check that finds ranks apart: lens.StepCheckError).
  m.def(
      "step_context",
      [](std::uint64_t step, bool derived, int global_rank, int source_rank, py::object group,
         int src, py::object check_group,
         std::optional<int> pipeline_source) -> std::optional<PyCarrier> {
        lens::Telemetry* t = lens::get_telemetry();
        PerTelemetry& state = per_telemetry();
        const bool source = global_rank == source_rank;
        const std::chrono::milliseconds timeout =
            t ? t->config().collective_timeout : std::chrono::milliseconds(300000);
        const std::string who = "lens: rank " + std::to_string(global_rank);
        std::optional<PyCarrier> out;
        if (derived) {
          lens::Telemetry* d = step_telemetry();
          out = PyCarrier{lens::derive_step_context(*d, d->config().trace_scope, step,
                                                    state.budget, pipeline_source),
                          source, std::nullopt};
        } else {
          std::optional<lens::StepCarrier> local;
          std::optional<std::int64_t> reserved_at;
          if (source && t) {
            lens::Telemetry* r = step_telemetry();
            reserved_at = r->now_unix_ns();
            local = lens::reserve_step_context(*r, r->config().trace_scope,
                                               r->config().rank.value_or(0), step, state.budget);
          }
          TorchCommunicator comm(std::move(group));
          std::optional<lens::StepCarrier> got;
          try {
            got = lens::broadcast_trace_context(comm, src, local, timeout, step);
          } catch (const lens::CommError& e) {
            if (t)
              lens::write_failure_record(*t, who,
                                         "broadcast_trace_context (step " + std::to_string(step) +
                                             ", source rank " + std::to_string(source_rank) +
                                             ") failed: " + e.what());
            throw;
          }
          if (got) out = PyCarrier{*got, source, source ? reserved_at : std::nullopt};
        }
        if (t == nullptr) return out;
        lens::step_check_interval(t->config(), t->config().trace_scope);  // throws what cannot work
        if (state.checks.due()) {
          TorchCommunicator checks(std::move(check_group));
          const bool per_pipeline =
              derived && t->config().trace_scope == lens::TraceScope::kPipeline;
          try {
            state.checks.check(checks, step, derived ? unwrap(out) : std::nullopt,
                               per_pipeline ? pipeline_source : std::nullopt, state.budget,
                               timeout);
          } catch (const lens::CommError& e) {
            lens::write_failure_record(*t, who, e.what());
            throw;
          }
        }
        state.checks.opened();
        return out;
      },
      py::arg("step"), py::arg("derived"), py::arg("global_rank"), py::arg("source_rank"),
      py::arg("group"), py::arg("src"), py::arg("check_group"),
      py::arg("pipeline_source") = py::none());
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
      [](py::object world, std::optional<std::uint64_t> step) {
        lens::Telemetry* t = lens::get_telemetry();
        if (!t) throw std::runtime_error("lens: telemetry is not initialised");
        PerTelemetry& state = per_telemetry();
        if (!state.clock) {
          state.clock_engine = std::make_unique<TorchCommunicator>(world);
          state.clock = std::make_unique<lens::ClockSchedule>(*t, *state.clock_engine, state.tracer,
                                                              t->config().collective_timeout);
        }
        TorchCommunicator::Lend lend(*state.clock_engine, std::move(world));
        state.clock->sync(step);
      },
      py::arg("world"), py::arg("step") = py::none());
}

}  // namespace lens_python
