/// \file
/// The protobuf wire format as the OTLP encoders write it (traces,
/// otlp_proto.h; metrics, metrics.h): fields straight into a byte buffer,
/// no message objects.
///
/// Nested messages get a 4-byte length slot that is filled in when the
/// message ends, written as a (valid, non-minimal) varint; this caps one
/// nested message at 256 MiB: a larger one sets too_large(), never a
/// corrupted length. Strings that are not valid UTF-8 (which OTLP
/// requires) are written with U+FFFD in place of each invalid byte, as the
/// JSON encoder does. Fields at their proto3 default are left out, as a
/// protobuf encoder does.
///
/// Thread safety: one writer per thread.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "lens/attribute.h"

namespace lens {

class ProtoWriter {
 public:
  enum WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

  explicit ProtoWriter(std::string& out) : out_(out) {}

  void varint(std::uint64_t v) {
    char buf[10];
    int n = 0;
    while (v >= 0x80) {
      buf[n++] = static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    buf[n++] = static_cast<char>(v);
    out_.append(buf, static_cast<std::size_t>(n));
  }
  void tag(std::uint32_t field, WireType type) {
    varint((static_cast<std::uint64_t>(field) << 3) | type);
  }

  void uint_field(std::uint32_t field, std::uint64_t v) {
    if (v == 0) return;  // proto3 default
    tag(field, kVarint);
    varint(v);
  }
  void int64_field(std::uint32_t field, std::int64_t v) {
    if (v == 0) return;
    tag(field, kVarint);
    varint(static_cast<std::uint64_t>(v));
  }
  void bool_field(std::uint32_t field, bool v) {
    tag(field, kVarint);
    varint(v ? 1 : 0);
  }
  // The 8 little-endian bytes of a fixed64 or a double.
  void raw64(std::uint64_t v) {
    char buf[8];
    for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>(v >> (8 * i));
    out_.append(buf, 8);
  }
  void fixed64_field(std::uint32_t field, std::uint64_t v) {
    if (v == 0) return;
    tag(field, kFixed64);
    raw64(v);
  }
  void fixed32_field(std::uint32_t field, std::uint32_t v) {
    if (v == 0) return;
    tag(field, kFixed32);
    char buf[4];
    for (int i = 0; i < 4; ++i) buf[i] = static_cast<char>(v >> (8 * i));
    out_.append(buf, 4);
  }
  static std::uint64_t double_bits(double v) {
    std::uint64_t bits;
    std::memcpy(&bits, &v, 8);
    return bits;
  }
  // Written even when 0: a double field is in a oneof, or optional.
  void double_field(std::uint32_t field, double v) {
    tag(field, kFixed64);
    raw64(double_bits(v));
  }
  void bytes_field(std::uint32_t field, const void* data, std::size_t n, bool keep_empty = false) {
    if (n == 0 && !keep_empty) return;
    tag(field, kLength);
    varint(n);
    out_.append(static_cast<const char*>(data), n);
  }
  // OTLP strings must be UTF-8: invalid bytes become U+FFFD, as in JSON.
  void string_field(std::uint32_t field, std::string_view s, bool keep_empty = false);

  // Starts a nested message (or a packed repeated field); returns the
  // position of its length slot.
  std::size_t begin(std::uint32_t field) {
    tag(field, kLength);
    const std::size_t at = out_.size();
    out_.append(4, '\0');
    return at;
  }
  // Fills the slot with the message's length as a 4-byte varint, which
  // holds at most 2^28 - 1: a longer message marks the request as too large.
  void end(std::size_t at) {
    const std::size_t n = out_.size() - at - 4;
    if (n >= kMaxNestedBytes) too_large_ = true;
    out_[at] = static_cast<char>((n & 0x7f) | 0x80);
    out_[at + 1] = static_cast<char>(((n >> 7) & 0x7f) | 0x80);
    out_[at + 2] = static_cast<char>(((n >> 14) & 0x7f) | 0x80);
    out_[at + 3] = static_cast<char>((n >> 21) & 0x7f);
  }

  static constexpr std::size_t kMaxNestedBytes = std::size_t{1} << 28;
  bool too_large() const { return too_large_; }

 private:
  std::string& out_;
  bool too_large_ = false;
};

/// Each attribute as an OTLP KeyValue (key 1, AnyValue 2) in field `field`.
void append_otlp_proto_attributes(ProtoWriter& w, std::uint32_t field, const Attributes& attrs);

}  // namespace lens
