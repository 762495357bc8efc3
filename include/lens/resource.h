/// \file
/// Resource: the attributes that describe the process producing spans
/// (service.name, nemo.run.id, dl.rank, ...), sent once per export.
///
/// Thread safety: a value type.
#pragma once

#include <string_view>

#include "lens/attribute.h"

namespace lens {

struct Resource {
  Attributes attributes;

  /// Sets key to value, replacing an existing entry with the same key.
  void set(std::string_view key, AttributeValue value);
  const AttributeValue* find(std::string_view key) const;
  /// The string value under key, or an empty view.
  std::string_view find_string(std::string_view key) const;
};

/// Parses OTEL_RESOURCE_ATTRIBUTES ("k1=v1,k2=v2", values percent-encoded as
/// W3C Baggage values). Throws ConfigError naming `setting` on a member
/// without '=', an empty key, or a bad percent escape.
Attributes parse_resource_attributes(std::string_view value,
                                     std::string_view setting = "OTEL_RESOURCE_ATTRIBUTES");

}  // namespace lens
