/// \file
/// The settings table: every setting of the telemetry's configuration, once.
///
/// Each row names a setting (the TelemetryOptions member, which is also
/// lens.init's keyword in Python), the variables it is read from (the first
/// one set wins), what it accepts, and whether the ranks of a job must agree
/// on it at start-up. From a row's kind come the functions that use it:
/// resolve_config() resolves the rows in table order (code over the
/// environment over the default); lens.init and the Python start-up record
/// turn their keywords into options with give_option(); lens.config() shows
/// each resolved value with shown(); the start-up agreement compares a
/// job-wide row's number() and names its first variable.
///
/// Adding a setting: a member in TelemetryOptions and in Config, a row in
/// src/telemetry/settings.cc, a line in the README's table; if job-wide, a
/// place in the start-up record (src/pp/startup_agreement.cc), which a test
/// asks for.
///
/// Thread safety: the table is constant; the functions are pure.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "lens/config.h"

namespace lens {

namespace detail {
class Env;
}

/// A setting's value as code gives it (a Python keyword's value) or as a
/// resolved setting is shown: unset, a flag, a whole number, a real (a
/// duration in seconds), a text.
using SettingValue = std::variant<std::monostate, bool, std::int64_t, double, std::string>;

/// How a row's value is written and read.
enum class SettingKind : std::uint8_t {
  kFlag,     ///< 1/0, true/false, yes/no, on/off
  kCount,    ///< a whole number in [lo, hi]
  kMillis,   ///< milliseconds in [lo, hi] in a variable; seconds in Python
  kChoice,   ///< one of the names in `accepted` (", "-separated), any case
  kText,     ///< a text, checked by the row's resolver
  kComposite ///< several variables into a structure; not given as one value
};

struct SettingRow {
  std::string_view option;  ///< TelemetryOptions' member; lens.init's keyword
  std::array<std::string_view, 3> variables;  ///< read in order; "" past the last
  SettingKind kind;
  std::int64_t lo = 0, hi = 0;  ///< a count's or a duration's bounds
  std::string_view accepted;    ///< a choice's names; else what errors say is accepted
  bool job_wide = false;        ///< the start-up agreement compares it
  /// Code over the variables over Config's default, into `config`; throws
  /// ConfigError naming the option or the variable.
  void (*resolve)(const SettingRow&, const TelemetryOptions&, const detail::Env&, Config&);
  /// A value given in code by name into `options`; throws ConfigError when
  /// the value is of another kind or out of bounds. Null: not given so (a
  /// variable only, or a structure only C++ gives).
  void (*give)(const SettingRow&, TelemetryOptions&, const SettingValue&) = nullptr;
  /// The resolved value as shown (lens.config()); null: not shown.
  SettingValue (*shown)(const SettingRow&, const Config&) = nullptr;
  /// The resolved value as the start-up agreement compares it (job-wide
  /// rows).
  std::uint64_t (*number)(const Config&) = nullptr;

  /// The variables that are set in this row.
  std::span<const std::string_view> variable_names() const;
};

/// Every row, in the order resolve_config() resolves them.
std::span<const SettingRow> setting_rows();

/// The row of `option`, or null.
const SettingRow* find_setting(std::string_view option);

/// Sets the option named `option` from a value given in code; throws
/// ConfigError on an option no row gives, naming those that are.
void give_option(TelemetryOptions& options, std::string_view option, const SettingValue& value);

}  // namespace lens
