#include "span_attributes.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <stdexcept>

namespace lens::analysis {

Attributes::Attributes(
    std::initializer_list<std::pair<std::string_view, std::string_view>> entries) {
  for (const auto& [key, text] : entries) set(key, text);
}

std::uint32_t Attributes::append(std::string_view bytes) {
  // A line is at most kMaxLineBytes (64 MiB): a span's keys and texts stay
  // far below what a 32-bit place can hold.
  if (chars_.size() + bytes.size() > std::numeric_limits<std::uint32_t>::max())
    throw std::length_error("a span's attributes exceed 4 GiB");
  const auto at = static_cast<std::uint32_t>(chars_.size());
  chars_.append(bytes);
  return at;
}

void Attributes::set(std::string_view key, std::string_view text, char type) {
  // A key or text of this span's own (set(k, *text(k), t)) is copied before
  // the buffer may move.
  const auto inside = [&](std::string_view v) {
    const std::less<const char*> before;
    return !v.empty() && !before(v.data(), chars_.data()) &&
           before(v.data(), chars_.data() + chars_.size());
  };
  if (inside(key) || inside(text)) {
    const std::string k(key), t(text);
    set(k, t, type);
    return;
  }
  // The first slot whose key is not less than `key`. Spans have a handful
  // of attributes and writers mostly give them in one order: from the end.
  std::size_t at = slots_.size();
  while (at > 0 && key_of(slots_[at - 1]) >= key) --at;
  if (at < slots_.size() && key_of(slots_[at]) == key) {
    Slot& s = slots_[at];
    s.text_size = static_cast<std::uint32_t>(text.size());
    s.text_at = append(text);
    s.type = type;
    return;
  }
  Slot s{};
  s.key_size = static_cast<std::uint32_t>(key.size());
  s.key_at = append(key);
  s.text_size = static_cast<std::uint32_t>(text.size());
  s.text_at = append(text);
  s.type = type;
  slots_.insert(slots_.begin() + static_cast<std::ptrdiff_t>(at), s);
}

void Attributes::erase(std::string_view key) {
  if (const std::ptrdiff_t i = slot_of(key); i >= 0) slots_.erase(slots_.begin() + i);
}

void Attributes::clear() {
  slots_.clear();
  chars_.clear();
}

std::ptrdiff_t Attributes::slot_of(std::string_view key) const {
  for (std::size_t i = 0; i < slots_.size(); ++i)
    if (key_of(slots_[i]) == key) return static_cast<std::ptrdiff_t>(i);
  return -1;
}

std::optional<std::string_view> Attributes::text(std::string_view key) const {
  const std::ptrdiff_t i = slot_of(key);
  if (i < 0) return std::nullopt;
  return entry(static_cast<std::size_t>(i)).text;
}

char Attributes::type(std::string_view key) const {
  const std::ptrdiff_t i = slot_of(key);
  return i < 0 ? 's' : slots_[static_cast<std::size_t>(i)].type;
}

Attributes::Entry Attributes::entry(std::size_t i) const {
  const Slot& s = slots_[i];
  return {key_of(s), std::string_view(chars_.data() + s.text_at, s.text_size), s.type};
}

bool Attributes::operator==(const Attributes& other) const {
  if (size() != other.size()) return false;
  for (std::size_t i = 0; i < size(); ++i) {
    const Entry a = entry(i), b = other.entry(i);
    if (a.key != b.key || a.text != b.text || a.type != b.type) return false;
  }
  return true;
}

}  // namespace lens::analysis
