// Recent: the latest `limit` keys remembered, each with a value; the oldest
// is forgotten when a new one would pass the limit. The step stream
// remembers the span and trace ids it handed over, per file, to tell a span
// delivered twice from a late one: up to 2^18 of them a file, so a node
// allocated per key (std::unordered_map and a std::deque of the order) cost
// ~50 bytes a key and an allocation per span. Here the keys and values lie
// in a ring in the order they came, and a flat table (open addressing,
// linear probing, deletion by shifting back) holds each key's place in the
// ring: ~16 bytes a span id, nothing allocated once the ring is full.
//
// Thread safety: a plain value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace lens::analysis {

template <typename Key, typename Value, typename Hash>
class Recent {
 public:
  explicit Recent(std::size_t limit) : limit_(limit) {
    if (limit == 0 || limit >= (std::size_t{1} << 31))
      throw std::invalid_argument("Recent: the limit must be 1 to 2^31 - 1");
  }

  // False when `key` was already remembered (its value is kept); sets
  // `forgot` when an older key had to go.
  bool remember(const Key& key, Value value, bool& forgot) {
    if (find(key) != nullptr) return false;
    std::uint32_t place;
    if (keys_.size() < limit_) {
      if (2 * (keys_.size() + 1) > slots_.size()) grow();
      place = static_cast<std::uint32_t>(keys_.size());
      keys_.push_back(key);
      values_.push_back(std::move(value));
    } else {
      place = oldest_;
      unlink(place);
      keys_[place] = key;
      values_[place] = std::move(value);
      oldest_ = place + 1 == limit_ ? 0 : place + 1;
      forgot = true;
    }
    std::size_t i = home(key);
    while (slots_[i] != kEmpty) i = (i + 1) & mask_;
    slots_[i] = place + 1;
    return true;
  }

  const Value* find(const Key& key) const {
    if (slots_.empty()) return nullptr;
    for (std::size_t i = home(key); slots_[i] != kEmpty; i = (i + 1) & mask_)
      if (keys_[slots_[i] - 1] == key) return &values_[slots_[i] - 1];
    return nullptr;
  }

  std::size_t size() const { return keys_.size(); }

 private:
  static constexpr std::uint32_t kEmpty = 0;  // a slot holds its key's place + 1

  std::size_t home(const Key& key) const {
    const auto h = static_cast<std::uint64_t>(Hash()(key));
    return static_cast<std::size_t>((h * 0x9e3779b97f4a7c15ULL) >> shift_) & mask_;
  }

  // Removes the slot of the key at `place`, shifting back each later slot
  // of its run that may sit in the hole.
  void unlink(std::uint32_t place) {
    std::size_t i = home(keys_[place]);
    while (slots_[i] != place + 1) i = (i + 1) & mask_;
    for (std::size_t j = (i + 1) & mask_; slots_[j] != kEmpty; j = (j + 1) & mask_) {
      const std::size_t h = home(keys_[slots_[j] - 1]);
      const bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
      if (stays) continue;
      slots_[i] = slots_[j];
      i = j;
    }
    slots_[i] = kEmpty;
  }

  void grow() {
    const std::size_t capacity = slots_.empty() ? 64 : 2 * slots_.size();
    slots_.assign(capacity, kEmpty);
    mask_ = capacity - 1;
    shift_ = 64;
    for (std::size_t c = capacity; c > 1; c >>= 1) --shift_;
    for (std::uint32_t place = 0; place < keys_.size(); ++place) {
      std::size_t i = home(keys_[place]);
      while (slots_[i] != kEmpty) i = (i + 1) & mask_;
      slots_[i] = place + 1;
    }
  }

  std::size_t limit_;
  std::vector<Key> keys_;  // the ring: in arrival order from `oldest_` once full
  std::vector<Value> values_;
  std::uint32_t oldest_ = 0;
  std::vector<std::uint32_t> slots_;
  std::size_t mask_ = 0;
  int shift_ = 64;
};

}  // namespace lens::analysis
