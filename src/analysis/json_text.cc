// JSON written as nlohmann::json's dump(indent) writes it (json_text.h).
#include "json_text.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>

namespace lens::analysis {
namespace {

template <typename Integer>
void write_integer(std::string& out, Integer v) {
  char digits[24];
  const char* end = std::to_chars(digits, digits + sizeof digits, v).ptr;
  out.append(digits, static_cast<std::size_t>(end - digits));
}

// A string (or key) escaped as the serializer escapes it (with
// ensure_ascii off it escapes the quote, the backslash and the bytes below
// 0x20 only): a text of none of those as it is, else the serializer's own
// call (which also refuses invalid UTF-8, as dump does).
constexpr std::array<bool, 256> kPlainByte = [] {
  std::array<bool, 256> plain{};
  for (int b = 0x20; b < 0x80; ++b) plain[b] = b != '"' && b != '\\';
  return plain;
}();

void write_string(std::string& out, std::string_view v) {
  for (const char c : v)
    if (!kPlainByte[static_cast<unsigned char>(c)]) {
      out += nlohmann::json(v).dump();
      return;
    }
  const std::size_t at = out.size();
  out.resize(at + v.size() + 2);
  char* p = out.data() + at;
  p[0] = '"';
  if (!v.empty()) std::memcpy(p + 1, v.data(), v.size());  // an empty view's data may be null
  p[v.size() + 1] = '"';
}

void indent_to(std::string& out, int indent, int depth) {
  out.append(static_cast<std::size_t>(indent * depth), ' ');
}

}  // namespace

void write_double(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  // The serializer's own formatting (nlohmann 3.x: grisu2, then as printf's
  // %g would lay the digits out, with ".0" on integral values).
  char digits[64];
  const char* end = nlohmann::detail::to_chars(digits, digits + sizeof digits, v);
  out.append(digits, static_cast<std::size_t>(end - digits));
}

void write_json(std::string& out, const nlohmann::json& v, int indent, int depth) {
  switch (v.type()) {
    case nlohmann::json::value_t::object: {
      if (v.empty()) {
        out += "{}";
        return;
      }
      out += "{\n";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ",\n";
        first = false;
        indent_to(out, indent, depth + 1);
        write_string(out, it.key());
        out += ": ";
        write_json(out, it.value(), indent, depth + 1);
      }
      out += '\n';
      indent_to(out, indent, depth);
      out += '}';
      return;
    }
    case nlohmann::json::value_t::array:
      write_array(out, indent, depth, v.size(),
                  [&](std::string& o, std::size_t i, int d) { write_json(o, v[i], indent, d); });
      return;
    case nlohmann::json::value_t::number_float:
      write_double(out, v.get<double>());
      return;
    case nlohmann::json::value_t::number_integer:
      write_integer(out, v.get<std::int64_t>());
      return;
    case nlohmann::json::value_t::number_unsigned:
      write_integer(out, v.get<std::uint64_t>());
      return;
    default:  // strings, booleans, null, binary: as the serializer writes them
      out += v.dump();
      return;
  }
}

std::string& JsonObjectText::member(std::string_view key) {
  members_.push_back({key, text_.size(), 0});
  return text_;
}

std::string& JsonObjectText::add_text(std::string_view key) { return member(key); }

void JsonObjectText::add(std::string_view key, bool v) { member(key) += v ? "true" : "false"; }
void JsonObjectText::add(std::string_view key, long long v) { write_integer(member(key), v); }
void JsonObjectText::add(std::string_view key, unsigned long long v) {
  write_integer(member(key), v);
}
void JsonObjectText::add(std::string_view key, double v) { write_double(member(key), v); }
void JsonObjectText::add(std::string_view key, const std::optional<double>& v) {
  if (v)
    add(key, *v);
  else
    add(key, nullptr);
}
void JsonObjectText::add(std::string_view key, std::nullptr_t) { member(key) += "null"; }
void JsonObjectText::add(std::string_view key, std::string_view v) { write_string(member(key), v); }
void JsonObjectText::add(std::string_view key, const std::vector<int>& v) {
  std::string& out = member(key);
  write_array(out, indent_, depth_ + 1, v.size(),
              [&](std::string& o, std::size_t i, int) { write_integer(o, v[i]); });
}
void JsonObjectText::add(std::string_view key, const nlohmann::json& v) {
  write_json(member(key), v, indent_, depth_ + 1);
}

bool JsonObjectText::same_keys_as_last() const {
  if (members_.size() != last_keys_.size()) return false;
  for (std::size_t i = 0; i < members_.size(); ++i)
    if (members_[i].key.data() != last_keys_[i].data() ||
        members_[i].key.size() != last_keys_[i].size())
      return false;
  return true;
}

void JsonObjectText::order_members() {
  order_.resize(members_.size());
  std::iota(order_.begin(), order_.end(), 0u);
  std::sort(order_.begin(), order_.end(),
            [&](std::uint32_t a, std::uint32_t b) { return members_[a].key < members_[b].key; });
  for (std::size_t i = 1; i < order_.size(); ++i)
    if (members_[order_[i - 1]].key == members_[order_[i]].key) {
      last_keys_.clear();
      throw std::logic_error("JsonObjectText: the key \"" + std::string(members_[order_[i]].key) +
                             "\" was given twice");
    }
  heads_.clear();
  head_begin_.clear();
  for (const std::uint32_t m : order_) {
    head_begin_.push_back(heads_.size());
    indent_to(heads_, indent_, depth_ + 1);
    write_string(heads_, members_[m].key);
    heads_ += ": ";
  }
  head_begin_.push_back(heads_.size());
  last_keys_.clear();
  for (const Member& m : members_) last_keys_.push_back(m.key);
}

void JsonObjectText::write(std::string& out) {
  if (members_.empty()) {
    out += "{}";
    return;
  }
  for (std::size_t i = 0; i < members_.size(); ++i)
    members_[i].end = i + 1 < members_.size() ? members_[i + 1].begin : text_.size();
  if (!same_keys_as_last()) order_members();
  out += "{\n";
  for (std::size_t place = 0; place < order_.size(); ++place) {
    const Member& m = members_[order_[place]];
    if (place > 0) out += ",\n";
    out.append(heads_, head_begin_[place], head_begin_[place + 1] - head_begin_[place]);
    out.append(text_, m.begin, m.end - m.begin);
  }
  out += '\n';
  indent_to(out, indent_, depth_);
  out += '}';
}

}  // namespace lens::analysis
