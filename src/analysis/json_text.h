// JsonObjectText: a JSON object written straight to text, byte for byte as
// nlohmann::json's dump(indent) writes the same value, without building the
// DOM. `lens analyze --json` writes a few dozen numbers per stage and step;
// a DOM of them (a map node and a key string per member, then the dump) cost
// as much as reading the run's spans on the thread that must write it.
//
// What dump(indent) does, and this does too: an object's members in the
// order of their keys' bytes (nlohmann::json keeps them in a std::map),
// whatever order they were added in; each level indented by
// `indent` more spaces, "key": value, empty objects and arrays as {} and
// []; integers in decimal; doubles as nlohmann::detail::to_chars writes
// them (the serializer's own call: the same digits), not finite ones as
// null; strings escaped by the serializer itself. A key given twice is a
// mistake of the caller's (std::logic_error at write). Keys are not
// copied: they must outlive the object and keep their bytes (the callers'
// are literals). An object reused for rows (clear) whose keys come in the
// same order, as the same texts, writes them in the order it found for the
// first row, each key as it was escaped then: the rows of an array cost
// their values, not a sort.
//
// Thread safety: a plain value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lens::analysis {

class JsonObjectText {
 public:
  // An object written at `depth` levels of `indent` spaces.
  JsonObjectText(int indent, int depth) : indent_(indent), depth_(depth) {}

  void add(std::string_view key, bool v);
  void add(std::string_view key, int v) { add(key, static_cast<long long>(v)); }
  void add(std::string_view key, long v) { add(key, static_cast<long long>(v)); }
  void add(std::string_view key, long long v);
  void add(std::string_view key, unsigned v) { add(key, static_cast<unsigned long long>(v)); }
  void add(std::string_view key, unsigned long v) {
    add(key, static_cast<unsigned long long>(v));
  }
  void add(std::string_view key, unsigned long long v);
  void add(std::string_view key, double v);
  void add(std::string_view key, const std::optional<double>& v);  // null when absent
  void add(std::string_view key, std::nullptr_t);
  void add(std::string_view key, const char* v) { add(key, std::string_view(v)); }
  void add(std::string_view key, const std::string& v) { add(key, std::string_view(v)); }
  void add(std::string_view key, std::string_view v);
  void add(std::string_view key, const std::vector<int>& v);
  void add(std::string_view key, const nlohmann::json& v);

  // A member whose value the caller writes into the returned text: a value
  // at depth() + 1 (write_array, another JsonObjectText's write).
  std::string& add_text(std::string_view key);

  int indent() const { return indent_; }
  int depth() const { return depth_; }

  // Appends the object to `out`: its members in key order.
  void write(std::string& out);

  // Forgets the members (keeping the room), for the next object.
  void clear() {
    members_.clear();
    text_.clear();
  }

 private:
  struct Member {
    std::string_view key;
    std::size_t begin, end;  // its value's text in text_ (end: set by write)
  };
  std::string& member(std::string_view key);
  // Whether the members' keys are the last write's, as the same texts.
  bool same_keys_as_last() const;
  // Settles the order of the members' keys and each one's indented "key": .
  void order_members();

  int indent_, depth_;
  std::vector<Member> members_;
  std::string text_;  // every member's value, in the order they were added
  // The last write's keys (in the order added), their places in key order,
  // and for each place its indented key and colon in heads_ (from
  // head_begin_[place] to the next place's).
  std::vector<std::string_view> last_keys_;
  std::vector<std::uint32_t> order_;
  std::string heads_;
  std::vector<std::size_t> head_begin_;
};

// Appends a JSON array of `count` items at `depth` to `out`: item(out, i,
// depth + 1) appends the i-th.
template <typename Item>
void write_array(std::string& out, int indent, int depth, std::size_t count, Item&& item) {
  if (count == 0) {
    out += "[]";
    return;
  }
  out += "[\n";
  for (std::size_t i = 0; i < count; ++i) {
    if (i > 0) out += ",\n";
    out.append(static_cast<std::size_t>(indent * (depth + 1)), ' ');
    item(out, i, depth + 1);
  }
  out += '\n';
  out.append(static_cast<std::size_t>(indent * depth), ' ');
  out += ']';
}

// `parent`'s member `key`: an array of `rows`, each an object of the
// members fill(object, row) adds (one object reused: its rows' keys are
// ordered once).
template <typename Rows, typename Fill>
void add_rows(JsonObjectText& parent, std::string_view key, const Rows& rows, Fill&& fill) {
  JsonObjectText row(parent.indent(), parent.depth() + 2);
  write_array(parent.add_text(key), parent.indent(), parent.depth() + 1, rows.size(),
              [&](std::string& out, std::size_t i, int) {
                row.clear();
                fill(row, rows[i]);
                row.write(out);
              });
}

// A figure that is absent below 0 (a bubble that could not be computed),
// written as null.
inline std::optional<double> or_null(double v) {
  return v >= 0 ? std::optional<double>(v) : std::nullopt;
}

// Appends `v` at `depth` as dump(indent) writes it.
void write_json(std::string& out, const nlohmann::json& v, int indent, int depth);

// Appends a double as dump writes it.
void write_double(std::string& out, double v);

}  // namespace lens::analysis
