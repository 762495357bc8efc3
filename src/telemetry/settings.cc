// The settings table (lens/settings.h): the kinds a row can be, and the rows.
#include "lens/settings.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <type_traits>
#include <utility>

#include "lens/error.h"
#include "setting.h"

namespace lens {
namespace {

using detail::Env;
using detail::lower;
using detail::parse_bool;
using detail::parse_uint;

// A member of Config, or of a structure in it: (config .* a .* b).
template <auto... Path>
auto& member(Config& c) {
  return (c .* ... .* Path);
}
template <auto... Path>
const auto& member(const Config& c) {
  return (c .* ... .* Path);
}

template <typename T>
struct Optional : std::false_type {};
template <typename T>
struct Optional<std::optional<T>> : std::true_type {
  using type = T;
};

// The type a TelemetryOptions member holds when set.
template <auto Option>
using OptionType =
    typename std::remove_cvref_t<decltype(std::declval<TelemetryOptions&>().*Option)>::value_type;

[[noreturn]] void refuse(const SettingRow& row, const std::string& value,
                         std::string_view accepted) {
  throw ConfigError(std::string(row.option) + "=" + value + " is not valid; accepted: " +
                    std::string(accepted));
}

std::string bounds(const SettingRow& row) {
  return std::to_string(row.lo) + " to " + std::to_string(row.hi);
}

std::string shown_value(const SettingValue& v) {
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "True" : "False";
  if (const auto* n = std::get_if<std::int64_t>(&v)) return std::to_string(*n);
  if (const auto* d = std::get_if<double>(&v)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", *d);
    return buf;
  }
  if (const auto* s = std::get_if<std::string>(&v)) return "'" + *s + "'";
  return "None";
}

std::int64_t whole(const SettingRow& row, const SettingValue& v) {
  const auto* n = std::get_if<std::int64_t>(&v);
  if (n == nullptr) refuse(row, shown_value(v), "an integer from " + bounds(row));
  if (*n < row.lo || *n > row.hi) refuse(row, shown_value(v), bounds(row));
  return *n;
}

const std::string& text(const SettingRow& row, const SettingValue& v) {
  const auto* s = std::get_if<std::string>(&v);
  if (s == nullptr) refuse(row, shown_value(v), "a text");
  return *s;
}

// A choice's names, in the order of their enumerators.
std::vector<std::string_view> names(const SettingRow& row) {
  std::vector<std::string_view> out;
  std::string_view rest = row.accepted;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(", ");
    out.push_back(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 2);
  }
  return out;
}

template <auto Option, auto... Path>
struct Flag {
  static void resolve(const SettingRow& row, const TelemetryOptions& o, const Env& env,
                      Config& c) {
    if (const auto& v = o.*Option)
      member<Path...>(c) = *v;
    else if (auto s = env.get(row.variable_names()))
      member<Path...>(c) = parse_bool(*s);
  }
  static void give(const SettingRow& row, TelemetryOptions& o, const SettingValue& v) {
    const auto* b = std::get_if<bool>(&v);
    if (b == nullptr) refuse(row, shown_value(v), "True or False");
    o.*Option = *b;
  }
  static SettingValue shown(const SettingRow&, const Config& c) { return member<Path...>(c); }
  static std::uint64_t number(const Config& c) { return member<Path...>(c) ? 1 : 0; }
};

// A whole number in [lo, hi]; Config's member may be optional (unset when
// neither the option nor a variable gives it).
template <auto Option, auto... Path>
struct Count {
  static void resolve(const SettingRow& row, const TelemetryOptions& o, const Env& env,
                      Config& c) {
    using T = OptionType<Option>;
    if (const auto& v = o.*Option) {
      const auto n = static_cast<std::int64_t>(*v);
      if (n < row.lo || n > row.hi) refuse(row, std::to_string(n), bounds(row));
      member<Path...>(c) = *v;
    } else if (auto s = env.get(row.variable_names())) {
      member<Path...>(c) = static_cast<T>(parse_uint(*s, static_cast<std::uint64_t>(row.lo),
                                                     static_cast<std::uint64_t>(row.hi)));
    }
  }
  static void give(const SettingRow& row, TelemetryOptions& o, const SettingValue& v) {
    o.*Option = static_cast<OptionType<Option>>(whole(row, v));
  }
  static SettingValue shown(const SettingRow&, const Config& c) {
    const auto& v = member<Path...>(c);
    if constexpr (Optional<std::remove_cvref_t<decltype(v)>>::value) {
      if (!v) return std::monostate{};
      return static_cast<std::int64_t>(*v);
    } else {
      return static_cast<std::int64_t>(v);
    }
  }
  static std::uint64_t number(const Config& c) {
    const auto& v = member<Path...>(c);
    if constexpr (Optional<std::remove_cvref_t<decltype(v)>>::value)
      return static_cast<std::uint64_t>(v.value_or(0));
    else
      return static_cast<std::uint64_t>(v);
  }
};

// Milliseconds in [lo, hi]: a count of them in a variable and in C++, seconds
// in Python.
template <auto Option, auto... Path>
struct Millis {
  static std::string ms_bounds(const SettingRow& row) { return bounds(row) + " ms"; }
  static void resolve(const SettingRow& row, const TelemetryOptions& o, const Env& env,
                      Config& c) {
    if (const auto& v = o.*Option) {
      if (v->count() < row.lo || v->count() > row.hi)
        refuse(row, std::to_string(v->count()) + " ms", ms_bounds(row));
      member<Path...>(c) = *v;
    } else if (auto s = env.get(row.variable_names())) {
      member<Path...>(c) = std::chrono::milliseconds(parse_uint(
          *s, static_cast<std::uint64_t>(row.lo), static_cast<std::uint64_t>(row.hi)));
    }
  }
  static void give(const SettingRow& row, TelemetryOptions& o, const SettingValue& v) {
    double seconds = 0;
    if (const auto* d = std::get_if<double>(&v))
      seconds = *d;
    else if (const auto* n = std::get_if<std::int64_t>(&v))
      seconds = static_cast<double>(*n);
    else
      seconds = std::nan("");
    const double ms = std::floor(seconds * 1000.0);
    if (!(ms >= static_cast<double>(row.lo) && ms <= static_cast<double>(row.hi))) {
      char range[64];
      std::snprintf(range, sizeof range, "%g to %g seconds", static_cast<double>(row.lo) / 1000,
                    static_cast<double>(row.hi) / 1000);
      refuse(row, shown_value(v), range);
    }
    o.*Option = std::chrono::milliseconds(static_cast<std::int64_t>(ms));
  }
  static SettingValue shown(const SettingRow&, const Config& c) {
    return static_cast<double>(member<Path...>(c).count()) / 1000.0;
  }
  static std::uint64_t number(const Config& c) {
    return static_cast<std::uint64_t>(member<Path...>(c).count());
  }
};

// One of the names in `accepted`, any case; the enumerator is the name's
// place.
template <auto Option, auto... Path>
struct Choice {
  using E = OptionType<Option>;
  static std::optional<E> named(const SettingRow& row, std::string_view value) {
    const std::string v = lower(value);
    const auto all = names(row);
    for (std::size_t i = 0; i < all.size(); ++i)
      if (all[i] == v) return static_cast<E>(i);
    return std::nullopt;
  }
  static void resolve(const SettingRow& row, const TelemetryOptions& o, const Env& env,
                      Config& c) {
    if (const auto& v = o.*Option) {
      if (static_cast<std::size_t>(*v) >= names(row).size())
        refuse(row, std::to_string(static_cast<int>(*v)), row.accepted);
      member<Path...>(c) = *v;
    } else if (auto s = env.get(row.variable_names())) {
      const auto e = named(row, s->value);
      if (!e) detail::fail(*s, row.accepted);
      member<Path...>(c) = *e;
    }
  }
  static void give(const SettingRow& row, TelemetryOptions& o, const SettingValue& v) {
    const auto e = named(row, text(row, v));
    if (!e) refuse(row, shown_value(v), row.accepted);
    o.*Option = *e;
  }
  static SettingValue shown(const SettingRow& row, const Config& c) {
    return std::string(names(row)[static_cast<std::size_t>(member<Path...>(c))]);
  }
  static std::uint64_t number(const Config& c) {
    return static_cast<std::uint64_t>(member<Path...>(c));
  }
};

// A text taken as it is.
template <auto Option, auto... Path>
struct Text {
  static void resolve(const SettingRow& row, const TelemetryOptions& o, const Env& env,
                      Config& c) {
    if (const auto& v = o.*Option)
      member<Path...>(c) = *v;
    else if (auto s = env.get(row.variable_names()))
      member<Path...>(c) = s->value;
  }
  static void give(const SettingRow& row, TelemetryOptions& o, const SettingValue& v) {
    o.*Option = text(row, v);
  }
  static SettingValue shown(const SettingRow&, const Config& c) { return member<Path...>(c); }
};

using Vars = std::array<std::string_view, 3>;
using TO = TelemetryOptions;

template <auto Option, auto... Path>
constexpr SettingRow flag(std::string_view option, Vars vars, bool job_wide = false) {
  using K = Flag<Option, Path...>;
  return {option, vars, SettingKind::kFlag, 0, 1, "", job_wide, &K::resolve, &K::give, &K::shown,
          &K::number};
}
template <auto Option, auto... Path>
constexpr SettingRow count(std::string_view option, Vars vars, std::int64_t lo, std::int64_t hi,
                           bool job_wide = false) {
  using K = Count<Option, Path...>;
  return {option, vars, SettingKind::kCount, lo, hi, "", job_wide, &K::resolve, &K::give,
          &K::shown, job_wide ? &K::number : nullptr};
}
template <auto Option, auto... Path>
constexpr SettingRow millis(std::string_view option, Vars vars, std::int64_t lo, std::int64_t hi) {
  using K = Millis<Option, Path...>;
  return {option, vars, SettingKind::kMillis, lo, hi, "", false, &K::resolve, &K::give, &K::shown};
}
template <auto Option, auto... Path>
constexpr SettingRow choice(std::string_view option, Vars vars, std::string_view names,
                            bool job_wide = false) {
  using K = Choice<Option, Path...>;
  return {option, vars,     SettingKind::kChoice, 0,         0,        names,
          job_wide, &K::resolve, &K::give,           &K::shown, &K::number};
}
template <auto Option, auto... Path>
constexpr SettingRow text(std::string_view option, Vars vars, std::string_view accepted) {
  using K = Text<Option, Path...>;
  return {option, vars, SettingKind::kText, 0, 0, accepted, false, &K::resolve, &K::give,
          &K::shown};
}
// A text whose resolver checks or derives more than the value (config.cc).
template <auto Option>
constexpr SettingRow checked_text(std::string_view option, Vars vars, std::string_view accepted,
                                  decltype(SettingRow::resolve) resolve,
                                  decltype(SettingRow::shown) shown, bool job_wide = false,
                                  decltype(SettingRow::number) number = nullptr) {
  return {option,   vars,    SettingKind::kText, 0,      0, accepted, job_wide, resolve,
          &Text<Option>::give, shown, number};
}
// Read from variables into a structure, or a variable only code cannot give.
constexpr SettingRow composite(std::string_view option, Vars vars, std::string_view accepted,
                               decltype(SettingRow::resolve) resolve,
                               decltype(SettingRow::shown) shown = nullptr, bool job_wide = false) {
  return {option, vars, SettingKind::kComposite, 0, 0, accepted, job_wide, resolve, nullptr, shown};
}

constexpr std::int64_t kMaxInterval = 100000000;

using namespace detail;  // the resolvers of the settings that are more than a value

// In resolution order: a row may use what the rows above it resolved (the
// exporter's default, the service name's resource, the trace file's rank).
const SettingRow kRows[] = {
    flag<&TO::enabled, &Config::enabled>("enabled", {"MEGATRON_OTEL_ENABLED", "NEMO_LENS_ENABLED"},
                                         true),
    composite("sdk_disabled", {"OTEL_SDK_DISABLED"}, "true turns telemetry off",
              resolve_sdk_disabled),
    checked_text<&TO::span_groups>(
        "span_groups", {"MEGATRON_OTEL_SPAN_GROUPS", "NEMO_LENS_SPAN_GROUPS"},
        "a comma list of span groups and presets", resolve_span_groups, show_span_groups, true,
        span_groups_number),
    checked_text<&TO::exporter>("exporter", {"MEGATRON_OTEL_EXPORTER", "NEMO_LENS_EXPORTER"},
                                "otlp, file, console, none", resolve_exporter,
                                Text<&TO::exporter, &Config::exporter>::shown),
    composite("otlp", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"},
              "OTEL_EXPORTER_OTLP_[TRACES_]* (README)", resolve_traces_otlp),
    composite("spool_dir", {"LENS_SPOOL_DIR"}, "a directory", resolve_spool_dir),
    checked_text<&TO::run_id>("run_id", {"MEGATRON_OTEL_RUN_ID", "NEMO_LENS_RUN_ID", "SLURM_JOB_ID"},
                              "letters, digits, '-', '_' and '.'", resolve_run_id,
                              Text<&TO::run_id, &Config::run_id>::shown),
    composite("resource_attributes", {"OTEL_RESOURCE_ATTRIBUTES"}, "k=v,k=v, values percent-encoded",
              resolve_resource_attributes),
    checked_text<&TO::service_name>("service_name", {"OTEL_SERVICE_NAME"}, "a text",
                                    resolve_service_name,
                                    Text<&TO::service_name, &Config::service_name>::shown),
    count<&TO::rank, &Config::rank>("rank", {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}, 0,
                                    1 << 30),
    count<&TO::world_size, &Config::world_size>(
        "world_size", {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1, 1 << 30),
    text<&TO::trace_dir, &Config::trace_dir>("trace_dir", {"LENS_TRACE_DIR"}, "a directory"),
    checked_text<&TO::trace_file>(
        "trace_file", {"LENS_TRACE_FILE"},
        "a file name (no '/'), with {rank}, {pid} and {run_id} placeholders", resolve_trace_file,
        Text<&TO::trace_file, &Config::trace_file>::shown),
    count<&TO::max_queue_size, &Config::batch, &BatchProcessorOptions::max_queue_size>(
        "max_queue_size", {"OTEL_BSP_MAX_QUEUE_SIZE"}, 1, kMaxCount),
    count<&TO::max_export_batch_size, &Config::batch,
          &BatchProcessorOptions::max_export_batch_size>(
        "max_export_batch_size", {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE"}, 1, kMaxCount),
    millis<&TO::schedule_delay, &Config::batch, &BatchProcessorOptions::schedule_delay>(
        "schedule_delay", {"OTEL_BSP_SCHEDULE_DELAY"}, 0, kMaxMillis),
    millis<&TO::export_timeout, &Config::batch, &BatchProcessorOptions::export_timeout>(
        "export_timeout", {"OTEL_BSP_EXPORT_TIMEOUT"}, 0, kMaxMillis),
    composite("span_limits",
              {"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_SPAN_EVENT_COUNT_LIMIT",
               "OTEL_SPAN_LINK_COUNT_LIMIT"},
              "OTEL_*_COUNT_LIMIT (README)", resolve_span_limits),
    composite("sampler", {"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"},
              "always_on, always_off, traceidratio, parentbased_always_on, "
              "parentbased_always_off, parentbased_traceidratio",
              resolve_sampler, show_sampler, true),
    // 0 means "wait forever" to c10d but "fail at once" to MPI: neither is
    // what a timeout is for.
    millis<&TO::collective_timeout, &Config::collective_timeout>(
        "collective_timeout", {"LENS_COLLECTIVE_TIMEOUT_MS"}, 1, kMaxMillis),
    choice<&TO::trace_scope, &Config::trace_scope>("trace_scope", {"LENS_TRACE_SCOPE"},
                                                   "world, pipeline", true),
    {"export_filter", {"LENS_EXPORT_FILTER"}, SettingKind::kText, 0, 0,
     "axis=value[,axis=value] (axes pp, dp, tp)", false, resolve_export_filter,
     give_export_filter, show_export_filter},
    count<&TO::step_budget_per_minute, &Config::step_budget_per_minute>(
        "step_budget_per_minute", {"LENS_STEP_BUDGET"}, 0, 1000000, true),
    flag<&TO::step_prefetch, &Config::step_prefetch>("step_prefetch", {"LENS_STEP_PREFETCH"}, true),
    choice<&TO::step_context, &Config::step_context>("step_context", {"LENS_STEP_CONTEXT"},
                                                     "broadcast, derived", true),
    count<&TO::step_verify_steps, &Config::step_verify_steps>(
        "step_verify_steps", {"LENS_STEP_VERIFY_STEPS"}, 0, kMaxInterval, true),
    flag<&TO::clock_sync, &Config::clock_sync>("clock_sync", {"LENS_CLOCK_SYNC"}, true),
    count<&TO::clock_sync_steps, &Config::clock_sync_steps>(
        "clock_sync_steps", {"LENS_CLOCK_SYNC_STEPS"}, 0, kMaxInterval, true),
    count<&TO::clock_sync_seconds, &Config::clock_sync_seconds>(
        "clock_sync_seconds", {"LENS_CLOCK_SYNC_SECONDS"}, 0, kMaxInterval, true),
    count<&TO::clock_sync_exchanges, &Config::clock_sync_exchanges>(
        "clock_sync_exchanges", {"LENS_CLOCK_SYNC_EXCHANGES"}, 1, 64, true),
    count<&TO::device_max_pending, &Config::device_max_pending>(
        "device_max_pending", {"LENS_DEVICE_MAX_PENDING"}, 1, 8192),
    count<&TO::device_anchor_ms, &Config::device_anchor_ms>(
        "device_anchor_ms", {"LENS_DEVICE_ANCHOR_MS"}, 100, 3600000),
    flag<&TO::tail_selection, &Config::tail_selection>("tail_selection", {"LENS_TAIL_SELECTION"},
                                                       true),
    count<&TO::tail_hold_steps, &Config::tail_hold_steps>("tail_hold_steps",
                                                          {"LENS_TAIL_HOLD_STEPS"}, 1, 4096),
    count<&TO::tail_hold_mb, &Config::tail_hold_mb>("tail_hold_mb", {"LENS_TAIL_HOLD_MB"}, 1,
                                                    65536),
    count<&TO::tail_keep, &Config::tail_keep>("tail_keep", {"LENS_TAIL_KEEP"}, 1, 255, true),
    count<&TO::tail_baseline_percent, &Config::tail_baseline_percent>(
        "tail_baseline_percent", {"LENS_TAIL_BASELINE"}, 0, 100, true),
};

}  // namespace

std::span<const std::string_view> SettingRow::variable_names() const {
  std::size_t n = 0;
  while (n < variables.size() && !variables[n].empty()) ++n;
  return {variables.data(), n};
}

std::span<const SettingRow> setting_rows() { return kRows; }

const SettingRow* find_setting(std::string_view option) {
  for (const SettingRow& row : kRows)
    if (row.option == option) return &row;
  return nullptr;
}

void give_option(TelemetryOptions& options, std::string_view option, const SettingValue& value) {
  const SettingRow* row = find_setting(option);
  if (row == nullptr || row->give == nullptr) {
    std::string given;
    for (const SettingRow& r : kRows)
      if (r.give != nullptr) given += std::string(given.empty() ? "" : ", ") + std::string(r.option);
    throw ConfigError("'" + std::string(option) + "' is not a setting code can give; accepted: " +
                      given);
  }
  row->give(*row, options, value);
}

}  // namespace lens
