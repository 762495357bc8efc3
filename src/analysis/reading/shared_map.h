// SharedMap: a map of texts whose copies share one map until one of them is
// written (copy on write). A rank file's resource attributes are copied into
// every step window the stream hands over (step_stream.h); shared, a
// window's copy costs a pointer, not a node and a string a key allocated on
// the reading thread and freed on the window's.
//
// Thread safety: as a plain value. Copies of one map may be read, copied
// and destroyed on any threads; a write first gives the written copy a map
// of its own when the map was ever copied, so no thread's map changes
// under another's reads.
#pragma once

#include <atomic>
#include <cstddef>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <utility>

namespace lens::analysis {

template <typename V>
class SharedMap {
 public:
  using Map = std::map<std::string, V>;
  using value_type = typename Map::value_type;
  using const_iterator = typename Map::const_iterator;

  SharedMap() = default;
  SharedMap(std::initializer_list<value_type> entries)
      : map_(std::make_shared<Map>(entries)) {}
  SharedMap(const SharedMap& other) : map_(other.map_) { mark_shared(other); }
  SharedMap(SharedMap&& other) noexcept
      : map_(std::move(other.map_)), shared_(other.shared_.load(std::memory_order_relaxed)) {}
  SharedMap& operator=(const SharedMap& other) {
    if (this != &other) {
      map_ = other.map_;
      mark_shared(other);
    }
    return *this;
  }
  SharedMap& operator=(SharedMap&& other) noexcept {
    map_ = std::move(other.map_);
    shared_.store(other.shared_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return *this;
  }

  const Map& map() const { return map_ ? *map_ : empty_map(); }
  const_iterator begin() const { return map().begin(); }
  const_iterator end() const { return map().end(); }
  const_iterator find(const std::string& key) const { return map().find(key); }
  std::size_t count(const std::string& key) const { return map().count(key); }
  const V& at(const std::string& key) const { return map().at(key); }
  bool empty() const { return map().empty(); }
  std::size_t size() const { return map().size(); }
  bool operator==(const SharedMap& other) const { return map() == other.map(); }

  // The map to write: this copy's own (copied first when it was shared).
  Map& own() {
    if (!map_ || shared_.load(std::memory_order_relaxed)) {
      map_ = std::make_shared<Map>(map());
      shared_.store(false, std::memory_order_relaxed);
    }
    return *map_;
  }
  V& operator[](const std::string& key) { return own()[key]; }

 private:
  // Both copies are marked: neither writes the map they share. (Marking
  // the source is a write to a value being copied, which other threads may
  // copy at the same time: hence atomic.)
  void mark_shared(const SharedMap& other) {
    if (!map_) return;
    other.shared_.store(true, std::memory_order_relaxed);
    shared_.store(true, std::memory_order_relaxed);
  }

  static const Map& empty_map() {
    static const Map empty;
    return empty;
  }

  std::shared_ptr<Map> map_;  // null: empty
  mutable std::atomic<bool> shared_{false};
};

}  // namespace lens::analysis
