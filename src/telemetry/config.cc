#include "lens/config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <ctime>

#include "lens/error.h"
#include "lens/ids.h"
#include "lens/resource.h"
#include "lens/settings.h"
#include "setting.h"

namespace lens {
namespace {

using detail::Env;
using detail::fail;
using detail::lower;
using detail::parse_bool;
using detail::parse_uint;
using detail::Setting;
using detail::trimmed;

using detail::kMaxCount;
using detail::kMaxMillis;

// OTEL_EXPORTER_OTLP_HEADERS: "k=v,k=v", values percent-encoded. Errors name
// the variable and the member's position, never a value (they carry tokens).
std::vector<std::pair<std::string, std::string>> parse_headers(const Setting& s) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t pos = 0;
  int member = 0;
  while (pos <= s.value.size()) {
    std::size_t comma = s.value.find(',', pos);
    if (comma == std::string::npos) comma = s.value.size();
    ++member;
    std::string item = trimmed(std::string_view(s.value).substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty()) continue;
    auto eq = item.find('=');
    std::string key = eq == std::string::npos ? "" : trimmed(item.substr(0, eq));
    if (eq == std::string::npos || key.empty()) {
      throw ConfigError(s.name + ": member " + std::to_string(member) +
                        " is not key=value (values are not shown: they may hold secrets); "
                        "accepted: key=value pairs separated by ','");
    }
    // A header name is an HTTP token (RFC 9110): letters, digits and
    // !#$%&'*+-.^_`|~. The name is shown; a value never is.
    for (char ch : key) {
      const bool token = std::isalnum(static_cast<unsigned char>(ch)) ||
                         std::string_view("!#$%&'*+-.^_`|~").find(ch) != std::string_view::npos;
      if (!token)
        throw ConfigError(s.name + ": member " + std::to_string(member) + " has the header name '" +
                          key + "', which is not an HTTP token; accepted: letters, digits and " +
                          "!#$%&'*+-.^_`|~");
    }
    std::string value;
    const std::string raw = trimmed(item.substr(eq + 1));
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '%' && i + 2 < raw.size() &&
          std::isxdigit(static_cast<unsigned char>(raw[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(raw[i + 2]))) {
        value.push_back(static_cast<char>(std::stoi(raw.substr(i + 1, 2), nullptr, 16)));
        i += 2;
      } else {
        value.push_back(raw[i]);
      }
    }
    for (char ch : key + value) {
      if (ch == '\r' || ch == '\n' || ch == '\0')
        throw ConfigError(s.name + ": member " + std::to_string(member) +
                          " contains a line break; accepted: header names and values without "
                          "control characters");
    }
    out.emplace_back(key, value);
  }
  return out;
}

std::string checked_url(const Setting& s) {
  if (!(s.value.starts_with("http://") || s.value.starts_with("https://")) || s.value.size() < 9)
    throw ConfigError(s.name + "='" + redacted_url(s.value) +
                      "' is not valid; accepted: an http:// or https:// URL");
  return s.value;
}

// One signal's OTLP settings (`signal`: TRACES or METRICS): each
// OTEL_EXPORTER_OTLP_<signal>_X over OTEL_EXPORTER_OTLP_X; the endpoint
// used as is, else the base endpoint + `path` (/v1/traces).
void resolve_otlp(const Env& env, std::string_view signal, std::string_view path,
                  const std::optional<Setting>& signal_endpoint,
                  const std::optional<Setting>& base_endpoint, OtlpHttpOptions& o) {
  const auto named = [&](std::string_view x) {
    return "OTEL_EXPORTER_OTLP_" + std::string(signal) + "_" + std::string(x);
  };
  if (signal_endpoint) {
    o.endpoint = checked_url(*signal_endpoint);  // used as is
  } else if (base_endpoint) {
    std::string base = checked_url(*base_endpoint);
    while (!base.empty() && base.back() == '/') base.pop_back();
    o.endpoint = base + std::string(path);
  } else {
    o.endpoint = "http://localhost:4318" + std::string(path);  // the specification's default
  }
  if (auto p = env.get({named("PROTOCOL"), "OTEL_EXPORTER_OTLP_PROTOCOL"})) {
    const std::string v = lower(p->value);
    if (v == "http/protobuf")
      o.json = false;
    else if (v == "http/json")
      o.json = true;
    else
      fail(*p, "http/protobuf, http/json (grpc is not supported by lens)");
  }
  if (auto h = env.get({named("HEADERS"), "OTEL_EXPORTER_OTLP_HEADERS"}))
    o.headers = parse_headers(*h);
  if (auto t = env.get({named("TIMEOUT"), "OTEL_EXPORTER_OTLP_TIMEOUT"}))
    o.timeout = std::chrono::milliseconds(parse_uint(*t, 1, kMaxMillis));
  if (auto z = env.get({named("COMPRESSION"), "OTEL_EXPORTER_OTLP_COMPRESSION"})) {
    const std::string v = lower(z->value);
    if (v == "gzip")
      o.gzip = true;
    else if (v == "none")
      o.gzip = false;
    else
      fail(*z, "gzip, none");
  }
  if (auto cert = env.get({named("CERTIFICATE"), "OTEL_EXPORTER_OTLP_CERTIFICATE"})) {
    if (::access(cert->value.c_str(), R_OK) != 0)
      fail(*cert, "the path of a readable CA certificate file");
    o.certificate = cert->value;
  }
  // Mutual TLS: this client's certificate and its key, both or neither.
  const auto client_cert =
      env.get({named("CLIENT_CERTIFICATE"), "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"});
  const auto client_key = env.get({named("CLIENT_KEY"), "OTEL_EXPORTER_OTLP_CLIENT_KEY"});
  for (const auto* file : {&client_cert, &client_key})
    if (*file && ::access((*file)->value.c_str(), R_OK) != 0)
      fail(**file, "the path of a readable PEM file");
  if (client_cert.has_value() != client_key.has_value()) {
    const Setting& given = client_cert ? *client_cert : *client_key;
    throw ConfigError(
        given.name + " is set without " +
        (client_cert ? "OTEL_EXPORTER_OTLP_CLIENT_KEY" : "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE") +
        "; accepted: both (mutual TLS) or neither");
  }
  if (client_cert) {
    o.client_certificate = client_cert->value;
    o.client_key = client_key->value;
  }
}

}  // namespace

// The settings table's rows that are more than one value (setting.h).
namespace detail {

void resolve_sdk_disabled(const SettingRow& row, const TelemetryOptions&, const Env& env,
                          Config& c) {
  if (auto s = env.get(row.variable_names()); s && parse_bool(*s)) c.enabled = false;
}

void resolve_span_groups(const SettingRow& row, const TelemetryOptions& options, const Env& env,
                         Config& c) {
  if (options.span_groups) {
    c.span_groups = SpanGroupSet::parse(*options.span_groups, "span_groups option");
  } else if (auto s = env.get(row.variable_names())) {
    c.span_groups = SpanGroupSet::parse(s->value, s->name);
  } else {
    c.span_groups = SpanGroupSet::default_preset();
  }
}
SettingValue show_span_groups(const SettingRow&, const Config& c) {
  return c.span_groups.to_spec();
}
std::uint64_t span_groups_number(const Config& c) { return c.span_groups.bits(); }

// The exporter: the option, the variable, else otlp when an endpoint is
// given, else file.
void resolve_exporter(const SettingRow& row, const TelemetryOptions& options, const Env& env,
                      Config& c) {
  if (options.exporter_instance) {
    c.exporter = "custom";
    return;
  }
  std::optional<Setting> s;
  if (options.exporter)
    s = Setting{"exporter option", lower(*options.exporter)};
  else
    s = env.get(row.variable_names());
  if (s)
    c.exporter = lower(s->value);
  else
    c.exporter = options.otlp || env.get({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                                          "OTEL_EXPORTER_OTLP_ENDPOINT"})
                     ? "otlp"
                     : "file";
  if (c.exporter != "otlp" && c.exporter != "file" && c.exporter != "console" &&
      c.exporter != "none")
    fail(*s, row.accepted);
}

void resolve_traces_otlp(const SettingRow&, const TelemetryOptions& options, const Env& env,
                         Config& c) {
  if (options.otlp) {
    c.otlp = *options.otlp;
  } else {
    resolve_otlp(env, "TRACES", "/v1/traces", env.get({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}),
                 env.get({"OTEL_EXPORTER_OTLP_ENDPOINT"}), c.otlp);
  }
}

void resolve_spool_dir(const SettingRow& row, const TelemetryOptions&, const Env& env,
                       Config& c) {
  if (auto s = env.get(row.variable_names())) c.spool_dir = s->value;
}

// Run id: configured, else the scheduler's job id, else generated; it names a directory, so it
// keeps to a safe character set.
void resolve_run_id(const SettingRow& row, const TelemetryOptions& options, const Env& env,
                    Config& c) {
  if (options.run_id && !options.run_id->empty()) {
    c.run_id = *options.run_id;
  } else if (auto s = env.get(row.variable_names())) {
    c.run_id = s->value;
  } else {
    c.run_id = generate_run_id();
    c.run_id_generated = true;
  }
  for (char ch : c.run_id) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.')) {
      throw ConfigError("run id '" + c.run_id + "' is not valid; accepted: " +
                        std::string(row.accepted));
    }
  }
  if (c.run_id == "." || c.run_id == "..") {
    throw ConfigError("run id '" + c.run_id + "' is not valid; accepted: a name, not . or ..");
  }
}

// Resource attributes: the variable, then the options over it.
void resolve_resource_attributes(const SettingRow& row, const TelemetryOptions& options,
                                 const Env& env, Config& c) {
  if (auto s = env.get(row.variable_names())) {
    c.resource_attributes = parse_resource_attributes(s->value, s->name);
  }
  for (const auto& a : options.resource_attributes) {
    auto it = std::find_if(c.resource_attributes.begin(), c.resource_attributes.end(),
                           [&](const Attribute& x) { return x.key == a.key; });
    if (it != c.resource_attributes.end())
      it->value = a.value;
    else
      c.resource_attributes.push_back(a);
  }
}

// The service name: the option, the variable, the resource's service.name,
// else the default the options carry.
void resolve_service_name(const SettingRow& row, const TelemetryOptions& options, const Env& env,
                          Config& c) {
  if (options.service_name) {
    c.service_name = *options.service_name;
  } else if (auto s = env.get(row.variable_names())) {
    c.service_name = s->value;
  } else if (const auto* v = find_attribute(c.resource_attributes, "service.name");
             v && std::holds_alternative<std::string>(*v)) {
    c.service_name = std::get<std::string>(*v);
  } else {
    c.service_name = options.default_service_name;
  }
}

// The trace file name pattern (the default depends on the rank).
void resolve_trace_file(const SettingRow& row, const TelemetryOptions& options, const Env& env,
                        Config& c) {
  if (options.trace_file) {
    c.trace_file = *options.trace_file;
  } else if (auto s = env.get(row.variable_names())) {
    c.trace_file = s->value;
  } else {
    c.trace_file = c.rank ? "rank-{rank}.otlp.jsonl" : "process-{pid}.otlp.jsonl";
  }
  if (c.trace_file.find('/') != std::string::npos || c.trace_file == "." || c.trace_file == "..") {
    throw ConfigError("LENS_TRACE_FILE='" + c.trace_file + "' is not valid; accepted: " +
                      std::string(row.accepted));
  }
}

// The OTEL_*_LIMIT settings.
void resolve_span_limits(const SettingRow&, const TelemetryOptions& options, const Env& env,
                         Config& c) {
  if (options.span_limits) {
    c.span_limits = *options.span_limits;
  } else {
    auto& l = c.span_limits;
    auto limit = [&](std::initializer_list<std::string_view> names, std::uint32_t& field) {
      if (auto s = env.get(names)) field = static_cast<std::uint32_t>(parse_uint(*s, 0, kMaxCount));
    };
    limit({"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT"}, l.attribute_count);
    limit({"OTEL_SPAN_EVENT_COUNT_LIMIT"}, l.event_count);
    limit({"OTEL_SPAN_LINK_COUNT_LIMIT"}, l.link_count);
    limit({"OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT"},
          l.attribute_per_event_count);
    limit({"OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT"},
          l.attribute_per_link_count);
  }
}

// OTEL_TRACES_SAMPLER and its argument.
void resolve_sampler(const SettingRow& row, const TelemetryOptions& options, const Env& env,
                     Config& c) {
  if (options.sampler) {
    c.sampler = *options.sampler;
    return;
  }
  std::string name = "parentbased_always_on";
  auto s = env.get({"OTEL_TRACES_SAMPLER"});
  if (s) name = lower(s->value);
  std::string_view base = name;
  c.sampler.parent_based = base.starts_with("parentbased_");
  if (c.sampler.parent_based) base.remove_prefix(std::string_view("parentbased_").size());
  if (base == "always_on") {
    c.sampler.kind = Sampler::Kind::kAlwaysOn;
  } else if (base == "always_off") {
    c.sampler.kind = Sampler::Kind::kAlwaysOff;
  } else if (base == "traceidratio") {
    c.sampler.kind = Sampler::Kind::kTraceIdRatio;
    c.sampler.ratio = 1.0;
    if (auto arg = env.get({"OTEL_TRACES_SAMPLER_ARG"})) {
      double ratio = -1;
      auto [ptr, ec] =
          std::from_chars(arg->value.data(), arg->value.data() + arg->value.size(), ratio);
      if (ec != std::errc() || ptr != arg->value.data() + arg->value.size() || !(ratio >= 0) ||
          ratio > 1)
        fail(*arg, "a number from 0 to 1");
      c.sampler.ratio = ratio;
    }
  } else {
    fail(*s, row.accepted);
  }
}
SettingValue show_sampler(const SettingRow&, const Config& c) { return c.sampler.describe(); }

void resolve_export_filter(const SettingRow& row, const TelemetryOptions& options, const Env& env,
                           Config& c) {
  if (options.export_filter) {
    c.export_filter = *options.export_filter;
  } else if (auto s = env.get(row.variable_names())) {
    c.export_filter = ExportFilter::parse(s->value, s->name);
  }
}
void give_export_filter(const SettingRow& row, TelemetryOptions& o, const SettingValue& v) {
  const auto* s = std::get_if<std::string>(&v);
  if (s == nullptr)
    throw ConfigError(std::string(row.option) + " is not valid; accepted: a text, " +
                      std::string(row.accepted));
  o.export_filter = ExportFilter::parse(*s, row.option);
}
SettingValue show_export_filter(const SettingRow&, const Config& c) {
  return c.export_filter.to_string();
}

}  // namespace detail

namespace {

// What no one row can check: how rows agree with each other.
void check_across(const TelemetryOptions& options, Config& c) {
  if (c.rank && c.world_size && *c.rank >= *c.world_size) {
    throw ConfigError("rank " + std::to_string(*c.rank) + " is not below world size " +
                      std::to_string(*c.world_size) +
                      " (RANK/WORLD_SIZE or OMPI_COMM_WORLD_RANK/_SIZE); accepted: 0 <= rank < "
                      "world size");
  }
  const auto& b = c.batch;
  if (b.max_export_batch_size > b.max_queue_size) {
    throw ConfigError("OTEL_BSP_MAX_EXPORT_BATCH_SIZE=" + std::to_string(b.max_export_batch_size) +
                      " exceeds OTEL_BSP_MAX_QUEUE_SIZE=" + std::to_string(b.max_queue_size) +
                      "; accepted: a batch size no larger than the queue size");
  }
  if (c.tail_selection)
    c.batch.hold = StepHoldOptions{c.tail_hold_steps, std::uint64_t{c.tail_hold_mb} << 20};
  // The test aid: bounded so that no reading overflows (an hour, 10 %).
  if (options.test_clock_offset_ns < -3600'000'000'000 ||
      options.test_clock_offset_ns > 3600'000'000'000 ||
      !(options.test_clock_drift_ppm >= -100000 && options.test_clock_drift_ppm <= 100000))
    throw ConfigError(
        "test clock skew out of range; accepted: offsets within an hour, drift "
        "within 100000 ppm");
  c.test_clock_offset_ns = options.test_clock_offset_ns;
  c.test_clock_drift_ppm = options.test_clock_drift_ppm;
}

}  // namespace

EnvLookup process_environment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

std::string generate_run_id() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "%06llx",
                static_cast<unsigned long long>(IdGenerator::next_u64() & 0xffffff));
  return std::string(buf) + "-" + suffix;
}

Config resolve_config(const TelemetryOptions& options, const EnvLookup& lookup) {
  Env env(lookup);
  Config c;
  for (const SettingRow& row : setting_rows()) row.resolve(row, options, env, c);
  check_across(options, c);
  c.coordinates = options.coordinates;
  c.run_key = options.run_key ? *options.run_key : IdGenerator::next_u64();
  c.run_key_agreed = options.run_key.has_value();
  c.exporting = c.export_filter.keeps(c.coordinates);
  return c;
}

std::string trace_file_path(const Config& config) {
  std::string name = config.trace_file;
  auto replace_all = [&](std::string_view token, const std::string& with) {
    for (std::size_t at = name.find(token); at != std::string::npos;
         at = name.find(token, at + with.size()))
      name.replace(at, token.size(), with);
  };
  replace_all("{rank}", config.rank ? std::to_string(*config.rank) : std::string("0"));
  replace_all("{pid}", std::to_string(::getpid()));
  replace_all("{run_id}", config.run_id);
  return config.trace_dir + "/" + config.run_id + "/" + name;
}

MetricsExportConfig resolve_metrics_export(const EnvLookup& lookup) {
  Env env(lookup);
  MetricsExportConfig m;
  if (auto e = env.get({"OTEL_METRICS_EXPORTER"})) {
    const std::string v = lower(e->value);
    if (v == "otlp")
      m.otlp = true;
    else if (v != "none")
      fail(*e, "otlp, none (lens serves Prometheus itself: --metrics-port)");
  }
  resolve_otlp(env, "METRICS", "/v1/metrics", env.get({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"}),
               env.get({"OTEL_EXPORTER_OTLP_ENDPOINT"}), m.options);
  if (auto i = env.get({"OTEL_METRIC_EXPORT_INTERVAL"}))
    m.interval = std::chrono::milliseconds(parse_uint(*i, 1, kMaxMillis));
  if (auto t = env.get({"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"})) {
    if (lower(t->value) != "cumulative")
      fail(*t, "cumulative (lens's metrics are cumulative from the start of the run)");
  }
  return m;
}

}  // namespace lens
