// The protobuf writer's out-of-line parts (lens/otlp_proto_writer.h).
#include "lens/otlp_proto_writer.h"

#include <type_traits>
#include <variant>
#include <vector>

#include "utf8.h"

namespace lens {

void ProtoWriter::string_field(std::uint32_t field, std::string_view s, bool keep_empty) {
  if (detail::valid_utf8(s)) {
    bytes_field(field, s.data(), s.size(), keep_empty);
  } else {
    const std::string fixed = detail::with_invalid_utf8_replaced(s);
    bytes_field(field, fixed.data(), fixed.size(), keep_empty);
  }
}

namespace {

// AnyValue: string 1, bool 2, int 3, double 4, array 5 (ArrayValue.values 1).
void scalar(ProtoWriter& w, bool v) { w.bool_field(2, v); }
void scalar(ProtoWriter& w, std::int64_t v) {
  w.tag(3, ProtoWriter::kVarint);
  w.varint(static_cast<std::uint64_t>(v));
}
void scalar(ProtoWriter& w, double v) { w.double_field(4, v); }
void scalar(ProtoWriter& w, const std::string& v) { w.string_field(1, v, true); }

template <typename Vector>
void array(ProtoWriter& w, const Vector& values) {
  const auto arr = w.begin(5);
  for (const auto& v : values) {
    const auto item = w.begin(1);
    if constexpr (std::is_same_v<Vector, std::vector<bool>>)
      scalar(w, static_cast<bool>(v));  // vector<bool> yields proxies
    else
      scalar(w, v);
    w.end(item);
  }
  w.end(arr);
}

void any_value(ProtoWriter& w, const AttributeValue& value) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::int64_t> ||
                      std::is_same_v<T, double> || std::is_same_v<T, std::string>)
          scalar(w, v);
        else
          array(w, v);
      },
      value);
}

}  // namespace

// KeyValue: key 1, value 2.
void append_otlp_proto_attributes(ProtoWriter& w, std::uint32_t field, const Attributes& attrs) {
  for (const auto& a : attrs) {
    const auto kv = w.begin(field);
    w.string_field(1, a.key);
    const auto v = w.begin(2);
    any_value(w, a.value);
    w.end(v);
    w.end(kv);
  }
}

}  // namespace lens
