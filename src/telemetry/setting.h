// Internal header of the telemetry part: one configuration setting read
// from the environment, and the parsers that turn it into a value or into a
// ConfigError naming the variable, the value and what is accepted.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "lens/config.h"
#include "lens/settings.h"

namespace lens::detail {

// The bounds settings share: a count (queue, batch, span limits) is at most
// 2^24, a time in milliseconds (delays, timeouts, intervals) at most a day.
inline constexpr std::uint64_t kMaxCount = 1u << 24;
inline constexpr std::uint64_t kMaxMillis = 24ull * 3600 * 1000;

// A variable's value with its name, so errors can name where it came from.
struct Setting {
  std::string name;
  std::string value;
};

std::string lower(std::string_view s);
std::string trimmed(std::string_view s);

// The environment as configuration reads it: a variable set to blanks counts
// as unset.
class Env {
 public:
  explicit Env(const EnvLookup& lookup) : lookup_(lookup) {}
  // The first of `names` that is set and not empty, trimmed.
  std::optional<Setting> get(std::initializer_list<std::string_view> names) const;
  std::optional<Setting> get(std::span<const std::string_view> names) const;

 private:
  const EnvLookup& lookup_;
};

// Throws ConfigError: "<name>='<value>' is not valid; accepted: <accepted>".
[[noreturn]] void fail(const Setting& s, std::string_view accepted);
bool parse_bool(const Setting& s);
std::uint64_t parse_uint(const Setting& s, std::uint64_t min, std::uint64_t max);

// The settings table's rows that are more than one value (config.cc), each
// as SettingRow::resolve, ::give or ::shown takes it.
using Resolve = void(const SettingRow&, const TelemetryOptions&, const Env&, Config&);
Resolve resolve_sdk_disabled, resolve_span_groups, resolve_exporter, resolve_traces_otlp,
    resolve_spool_dir, resolve_run_id, resolve_resource_attributes, resolve_service_name,
    resolve_trace_file, resolve_span_limits, resolve_sampler, resolve_export_filter;
SettingValue show_span_groups(const SettingRow&, const Config& c);
std::uint64_t span_groups_number(const Config& c);
SettingValue show_sampler(const SettingRow&, const Config& c);
SettingValue show_export_filter(const SettingRow&, const Config& c);
void give_export_filter(const SettingRow& row, TelemetryOptions& o, const SettingValue& v);

}  // namespace lens::detail
