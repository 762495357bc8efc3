/// \file
/// Span groups: the switches that decide which spans a job records.
///
/// The groups and presets are Megatron's. A spec is a comma-separated,
/// case-insensitive list of presets and group names, e.g. "default,microbatch"
/// or "per_step". An unknown name is a ConfigError that lists the valid names.
///
/// Thread safety: SpanGroupSet is a value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lens {

enum class SpanGroup : std::uint8_t {
  kJob,
  kCheckpoint,
  kEvaluate,
  kInference,
  kModelInit,
  kLoadCheckpoint,
  kStep,
  kForwardBackward,
  kOptimizer,
  kCommunication,
  kDataLoading,
  kMicrobatch,
  kLayer,
  kActivationOffload,
};

inline constexpr int kSpanGroupCount = 14;

/// The group's configuration name, e.g. "forward_backward".
std::string_view span_group_name(SpanGroup group);

class SpanGroupSet {
 public:
  constexpr SpanGroupSet() = default;
  constexpr explicit SpanGroupSet(std::uint32_t bits) : bits_(bits) {}

  /// Parses a spec; throws ConfigError naming `setting` (the variable or
  /// option the spec came from) on an empty item or an unknown name.
  static SpanGroupSet parse(std::string_view spec, std::string_view setting = "span groups");

  static SpanGroupSet none() { return SpanGroupSet(0); }
  static SpanGroupSet default_preset();
  static SpanGroupSet per_step_preset();
  static SpanGroupSet all();

  constexpr bool contains(SpanGroup g) const { return (bits_ >> static_cast<unsigned>(g)) & 1u; }
  void insert(SpanGroup g) { bits_ |= 1u << static_cast<unsigned>(g); }
  void erase(SpanGroup g) { bits_ &= ~(1u << static_cast<unsigned>(g)); }
  constexpr std::uint32_t bits() const { return bits_; }

  /// Group names in declaration order, comma-separated.
  std::string to_string() const;
  /// The shortest spec that parses back to this set: the largest preset it
  /// contains, then the other groups ("per_step,microbatch").
  std::string to_spec() const;

  friend bool operator==(SpanGroupSet, SpanGroupSet) = default;

 private:
  std::uint32_t bits_ = 0;
};

}  // namespace lens
