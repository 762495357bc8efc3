#include "partial_success.h"

#include <algorithm>

namespace lens::detail {
namespace {

bool read_varint(std::string_view& in, std::uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const auto b = static_cast<std::uint8_t>(in.front());
    in.remove_prefix(1);
    v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

}  // namespace

std::int64_t rejected_spans_from_proto(std::string_view in) {
  std::int64_t rejected = 0;
  while (!in.empty()) {
    std::uint64_t key, len;
    if (!read_varint(in, key)) return rejected;
    const auto wire = key & 7;
    if (wire == 0) {
      std::uint64_t ignored;
      if (!read_varint(in, ignored)) return rejected;
    } else if (wire == 2) {
      if (!read_varint(in, len) || len > in.size()) return rejected;
      std::string_view sub = in.substr(0, len);
      in.remove_prefix(len);
      if ((key >> 3) != 1) continue;
      while (!sub.empty()) {
        std::uint64_t k2, v2;
        if (!read_varint(sub, k2)) return rejected;
        if ((k2 & 7) == 0) {
          if (!read_varint(sub, v2)) return rejected;
          if ((k2 >> 3) == 1) rejected = static_cast<std::int64_t>(v2);
        } else if ((k2 & 7) == 2) {
          if (!read_varint(sub, v2) || v2 > sub.size()) return rejected;
          sub.remove_prefix(v2);
        } else {
          return rejected;
        }
      }
    } else if (wire == 1 && in.size() >= 8) {
      in.remove_prefix(8);
    } else if (wire == 5 && in.size() >= 4) {
      in.remove_prefix(4);
    } else {
      return rejected;
    }
  }
  return rejected;
}

std::int64_t rejected_spans_from_json(std::string_view body) {
  const auto at = body.find("\"rejectedSpans\"");
  if (at == std::string_view::npos) return 0;
  std::int64_t v = 0;
  bool digits = false;
  for (char c : body.substr(at + 15)) {
    if (c == ':' || c == ' ' || c == '"' || c == '\t' || c == '\n') {
      if (digits) break;
      continue;
    }
    if (c < '0' || c > '9') break;
    digits = true;
    v = std::min<std::int64_t>(v * 10 + (c - '0'), 1LL << 40);
  }
  return v;
}

}  // namespace lens::detail
