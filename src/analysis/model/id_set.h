// IdSet: a set of 64-bit span keys in one flat table (open addressing,
// linear probing, deletion by shifting back). The step stream keeps the id
// of every span it holds and tests each span read against them: a node
// allocated per id, as std::unordered_set does, was one of the reader's
// largest costs per span.
//
// Thread safety: a plain value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lens::analysis {

class IdSet {
 public:
  // True when `key` was not in the set.
  bool insert(std::uint64_t key) {
    if (key == kEmpty) {
      if (has_empty_key_) return false;
      has_empty_key_ = true;
      ++size_;
      return true;
    }
    if (2 * (size_ + 1) > slots_.size()) grow();
    std::size_t i = home(key);
    while (slots_[i] != kEmpty) {
      if (slots_[i] == key) return false;
      i = (i + 1) & mask_;
    }
    slots_[i] = key;
    ++size_;
    return true;
  }

  // 1 when `key` was in the set, else 0.
  std::size_t erase(std::uint64_t key) {
    if (key == kEmpty) {
      if (!has_empty_key_) return 0;
      has_empty_key_ = false;
      --size_;
      return 1;
    }
    if (slots_.empty()) return 0;
    std::size_t i = home(key);
    while (slots_[i] != key) {
      if (slots_[i] == kEmpty) return 0;
      i = (i + 1) & mask_;
    }
    // Shift back each later key of the run that may sit in the hole.
    for (std::size_t j = (i + 1) & mask_; slots_[j] != kEmpty; j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j]);
      const bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
      if (stays) continue;
      slots_[i] = slots_[j];
      i = j;
    }
    slots_[i] = kEmpty;
    --size_;
    return 1;
  }

  bool contains(std::uint64_t key) const {
    if (key == kEmpty) return has_empty_key_;
    if (slots_.empty()) return false;
    for (std::size_t i = home(key); slots_[i] != kEmpty; i = (i + 1) & mask_)
      if (slots_[i] == key) return true;
    return false;
  }
  std::size_t count(std::uint64_t key) const { return contains(key) ? 1 : 0; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  static constexpr std::uint64_t kEmpty = 0;  // a key of 0 is held apart

  std::size_t home(std::uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9e3779b97f4a7c15ULL) >> shift_) & mask_;
  }
  void grow() {
    std::vector<std::uint64_t> old = std::move(slots_);
    const std::size_t capacity = old.empty() ? 64 : 2 * old.size();
    slots_.assign(capacity, kEmpty);
    mask_ = capacity - 1;
    shift_ = 64;
    for (std::size_t c = capacity; c > 1; c >>= 1) --shift_;
    for (const std::uint64_t key : old)
      if (key != kEmpty) {
        std::size_t i = home(key);
        while (slots_[i] != kEmpty) i = (i + 1) & mask_;
        slots_[i] = key;
      }
  }

  std::vector<std::uint64_t> slots_;
  std::size_t mask_ = 0;
  int shift_ = 64;
  std::size_t size_ = 0;  // the empty key included
  bool has_empty_key_ = false;
};

}  // namespace lens::analysis
