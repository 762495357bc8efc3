// Reading and parsing one setting (setting.h).
#include "setting.h"

#include <cctype>
#include <charconv>

#include "lens/error.h"

namespace lens::detail {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

std::optional<Setting> Env::get(std::initializer_list<std::string_view> names) const {
  return get(std::span<const std::string_view>(names.begin(), names.size()));
}

std::optional<Setting> Env::get(std::span<const std::string_view> names) const {
  for (auto name : names) {
    auto v = lookup_(name);
    if (v && !trimmed(*v).empty()) return Setting{std::string(name), trimmed(*v)};
  }
  return std::nullopt;
}

void fail(const Setting& s, std::string_view accepted) {
  throw ConfigError(s.name + "='" + s.value + "' is not valid; accepted: " + std::string(accepted));
}

bool parse_bool(const Setting& s) {
  const std::string v = lower(s.value);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  fail(s, "1, true, yes, on, 0, false, no, off (any case)");
}

std::uint64_t parse_uint(const Setting& s, std::uint64_t min, std::uint64_t max) {
  std::uint64_t v = 0;
  const char* first = s.value.data();
  const char* last = first + s.value.size();
  auto [ptr, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || ptr != last || v < min || v > max) {
    fail(s, "an integer from " + std::to_string(min) + " to " + std::to_string(max));
  }
  return v;
}

}  // namespace lens::detail
