// A span's attributes as the run reader reads them: each key with its
// value's text and the type it was written with, in key order, each key
// once (a key set again replaces its value, as the last of two members of
// the same name does in the reader).
//
// The keys and texts of one span share one buffer and the entries one
// array: a span's attributes cost two allocations however many it has (the
// reader makes millions of rows; a map costs several per attribute).
//
// The text of a value: stringValue as it is, an int in decimal, a bool as
// "true"/"false", a double as the shortest text that reads back the same
// (or NaN, Infinity, -Infinity), anything else as JSON (run_reader.h). The
// type: 'i' int, 'd' double (finite), 'b' bool, 's' anything else.
//
// Thread safety: a plain value.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lens::analysis {

class Attributes {
 public:
  struct Entry {
    std::string_view key, text;
    char type = 's';
  };

  class const_iterator {
   public:
    const_iterator(const Attributes* of, std::size_t at) : of_(of), at_(at) {}
    Entry operator*() const { return of_->entry(at_); }
    const_iterator& operator++() {
      ++at_;
      return *this;
    }
    bool operator==(const const_iterator& other) const { return at_ == other.at_; }
    bool operator!=(const const_iterator& other) const { return at_ != other.at_; }

   private:
    const Attributes* of_;
    std::size_t at_;
  };

  Attributes() = default;
  // Texts of type 's' (tests and hand-made rows).
  Attributes(std::initializer_list<std::pair<std::string_view, std::string_view>> entries);

  // Sets `key` to `text` of `type`, replacing a value set before (either
  // may be a view of this span's own).
  void set(std::string_view key, std::string_view text, char type = 's');
  void erase(std::string_view key);
  void clear();

  // The text of `key`'s value; nullopt when the span has no such key.
  std::optional<std::string_view> text(std::string_view key) const;
  // The type of `key`'s value; 's' when the span has no such key.
  char type(std::string_view key) const;
  bool has(std::string_view key) const { return slot_of(key) >= 0; }

  std::size_t size() const { return slots_.size(); }
  bool empty() const { return slots_.empty(); }
  Entry entry(std::size_t i) const;
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, slots_.size()}; }

  // The same keys, texts and types.
  bool operator==(const Attributes& other) const;
  bool operator!=(const Attributes& other) const { return !(*this == other); }

 private:
  struct Slot {
    std::uint32_t key_at, key_size, text_at, text_size;
    char type;
  };
  std::string_view key_of(const Slot& s) const { return {chars_.data() + s.key_at, s.key_size}; }
  // The slot of `key`, or -1.
  std::ptrdiff_t slot_of(std::string_view key) const;
  // Appends `bytes` to chars_; where they start.
  std::uint32_t append(std::string_view bytes);

  std::vector<Slot> slots_;  // in key order
  std::string chars_;        // every key and text, one after the other
};

}  // namespace lens::analysis
