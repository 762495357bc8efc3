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

namespace {

// At most this much of a receiver's message is kept (it goes to a log line).
constexpr std::size_t kMaxMessageBytes = 512;

// Printable ASCII only: the message comes from any server and ends in a log.
std::string printable(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, kMaxMessageBytes)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return out;
}

}  // namespace

PartialSuccess partial_success_from_proto(std::string_view in) {
  PartialSuccess result;
  std::int64_t& rejected = result.rejected_spans;
  while (!in.empty()) {
    std::uint64_t key, len;
    if (!read_varint(in, key)) return result;
    const auto wire = key & 7;
    if (wire == 0) {
      std::uint64_t ignored;
      if (!read_varint(in, ignored)) return result;
    } else if (wire == 2) {
      if (!read_varint(in, len) || len > in.size()) return result;
      std::string_view sub = in.substr(0, len);
      in.remove_prefix(len);
      if ((key >> 3) != 1) continue;
      while (!sub.empty()) {
        std::uint64_t k2, v2;
        if (!read_varint(sub, k2)) return result;
        if ((k2 & 7) == 0) {
          if (!read_varint(sub, v2)) return result;
          if ((k2 >> 3) == 1) rejected = static_cast<std::int64_t>(v2);
        } else if ((k2 & 7) == 2) {
          if (!read_varint(sub, v2) || v2 > sub.size()) return result;
          if ((k2 >> 3) == 2) result.error_message = printable(sub.substr(0, v2));
          sub.remove_prefix(v2);
        } else {
          return result;
        }
      }
    } else if (wire == 1 && in.size() >= 8) {
      in.remove_prefix(8);
    } else if (wire == 5 && in.size() >= 4) {
      in.remove_prefix(4);
    } else {
      return result;
    }
  }
  return result;
}

PartialSuccess partial_success_from_json(std::string_view body) {
  PartialSuccess result;
  if (const auto at = body.find("\"rejectedSpans\""); at != std::string_view::npos) {
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
    result.rejected_spans = v;
  }
  if (const auto at = body.find("\"errorMessage\""); at != std::string_view::npos) {
    // The string after the key, up to its closing quote (escapes kept as
    // written).
    auto open = body.find('"', body.find(':', at + 14));
    if (open != std::string_view::npos) {
      std::size_t end = open + 1;
      while (end < body.size() && body[end] != '"') end += body[end] == '\\' ? 2 : 1;
      result.error_message =
          printable(body.substr(open + 1, std::min(end, body.size()) - open - 1));
    }
  }
  return result;
}

}  // namespace lens::detail
