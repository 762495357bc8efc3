// JSON written as nlohmann::json's dump(indent) writes it (json_text.h).
#include "json_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
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
void write_string(std::string& out, std::string_view v) {
  const bool plain = std::all_of(v.begin(), v.end(), [](char c) {
    const auto b = static_cast<unsigned char>(c);
    return b >= 0x20 && b < 0x80 && c != '"' && c != '\\';
  });
  if (!plain) {
    out += nlohmann::json(v).dump();
    return;
  }
  out += '"';
  out += v;
  out += '"';
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

void JsonObjectText::write(std::string& out) {
  if (members_.empty()) {
    out += "{}";
    return;
  }
  for (std::size_t i = 0; i < members_.size(); ++i)
    members_[i].end = i + 1 < members_.size() ? members_[i + 1].begin : text_.size();
  std::sort(members_.begin(), members_.end(),
            [](const Member& a, const Member& b) { return a.key < b.key; });
  out += "{\n";
  for (std::size_t i = 0; i < members_.size(); ++i) {
    const Member& m = members_[i];
    if (i > 0) {
      if (members_[i - 1].key == m.key)
        throw std::logic_error("JsonObjectText: the key \"" + std::string(m.key) +
                               "\" was given twice");
      out += ",\n";
    }
    indent_to(out, indent_, depth_ + 1);
    write_string(out, m.key);
    out += ": ";
    out.append(text_, m.begin, m.end - m.begin);
  }
  out += '\n';
  indent_to(out, indent_, depth_);
  out += '}';
}

}  // namespace lens::analysis
