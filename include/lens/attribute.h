/// \file
/// Attribute values and key/value pairs, as in the OpenTelemetry data model:
/// bool, int64, double, string, and homogeneous arrays of those.
///
/// Thread safety: value types.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
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

/// A key/value pair whose key is borrowed (a call site's literal, alive for
/// the call): what a function that sets attributes on a span takes from a
/// braced list, so that no key is copied into a vector on the way.
struct BorrowedAttribute {
  std::string_view key;
  AttributeValue value;
};

/// The value stored under key, or nullptr.
const AttributeValue* find_attribute(const Attributes& attributes, std::string_view key);

}  // namespace lens
