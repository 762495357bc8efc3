// Internal header of the telemetry part: one configuration setting read
// from the environment, and the parsers that turn it into a value or into a
// ConfigError naming the variable, the value and what is accepted.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "lens/config.h"

namespace lens::detail {

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

 private:
  const EnvLookup& lookup_;
};

// Throws ConfigError: "<name>='<value>' is not valid; accepted: <accepted>".
[[noreturn]] void fail(const Setting& s, std::string_view accepted);
bool parse_bool(const Setting& s);
std::uint64_t parse_uint(const Setting& s, std::uint64_t min, std::uint64_t max);

}  // namespace lens::detail
