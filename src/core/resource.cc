#include "lens/resource.h"

#include "lens/error.h"

namespace lens {

const AttributeValue* find_attribute(const Attributes& attributes, std::string_view key) {
  for (const auto& a : attributes)
    if (a.key == key) return &a.value;
  return nullptr;
}

void Resource::set(std::string_view key, AttributeValue value) {
  for (auto& a : attributes) {
    if (a.key == key) {
      a.value = std::move(value);
      return;
    }
  }
  attributes.push_back({std::string(key), std::move(value)});
}

const AttributeValue* Resource::find(std::string_view key) const {
  return find_attribute(attributes, key);
}

std::string_view Resource::find_string(std::string_view key) const {
  const auto* v = find(key);
  if (v == nullptr) return {};
  const auto* s = std::get_if<std::string>(v);
  return s ? std::string_view(*s) : std::string_view();
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view s, std::string_view setting, std::string_view whole) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    int hi = i + 1 < s.size() ? hex_value(s[i + 1]) : -1;
    int lo = i + 2 < s.size() ? hex_value(s[i + 2]) : -1;
    if (hi >= 0 && lo >= 0) {
      out.push_back(static_cast<char>((hi << 4) | lo));
      i += 2;
      continue;
    }
    throw ConfigError(std::string(setting) + "='" + std::string(whole) +
                      "': bad percent escape in '" + std::string(s) +
                      "'; accepted: key=value pairs separated by ',', values percent-encoded");
  }
  return out;
}

}  // namespace

Attributes parse_resource_attributes(std::string_view value, std::string_view setting) {
  Attributes out;
  if (trim(value).empty()) return out;
  std::size_t pos = 0;
  while (true) {
    std::size_t comma = value.find(',', pos);
    std::string_view member = trim(
        value.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
    auto fail = [&](const std::string& why) {
      throw ConfigError(std::string(setting) + "='" + std::string(value) + "': " + why +
                        "; accepted: key=value pairs separated by ',', values percent-encoded");
    };
    auto eq = member.find('=');
    if (eq == std::string_view::npos) fail("member '" + std::string(member) + "' has no '='");
    std::string_view key = trim(member.substr(0, eq));
    if (key.empty()) fail("member '" + std::string(member) + "' has an empty key");
    std::string decoded = percent_decode(trim(member.substr(eq + 1)), setting, value);
    bool replaced = false;
    for (auto& a : out) {
      if (a.key == key) {
        a.value = decoded;
        replaced = true;
      }
    }
    if (!replaced) out.push_back({std::string(key), std::move(decoded)});
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace lens
