/// \file
/// Attribute values and key/value pairs, as in the OpenTelemetry data model:
/// bool, int64, double, string, and homogeneous arrays of those.
///
/// Thread safety: value types.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace lens {

using AttributeValue =
    std::variant<bool, std::int64_t, double, std::string, std::vector<bool>,
                 std::vector<std::int64_t>, std::vector<double>, std::vector<std::string>>;

struct Attribute {
  std::string key;
  AttributeValue value;

  friend bool operator==(const Attribute&, const Attribute&) = default;
};

using Attributes = std::vector<Attribute>;

/// The value stored under key, or nullptr.
const AttributeValue* find_attribute(const Attributes& attributes, std::string_view key);

}  // namespace lens
