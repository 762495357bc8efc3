#include "lens/span_groups.h"

#include <array>
#include <cctype>

#include "lens/error.h"

namespace lens {
namespace {

constexpr std::array<std::string_view, kSpanGroupCount> kGroupNames = {
    "job",   "checkpoint",         "evaluate",  "inference",     "model_init",   "load_checkpoint",
    "step",  "forward_backward",   "optimizer", "communication", "data_loading", "microbatch",
    "layer", "activation_offload",
};

SpanGroupSet of(std::initializer_list<SpanGroup> groups) {
  SpanGroupSet set;
  for (auto g : groups) set.insert(g);
  return set;
}

std::string lowercase_trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string valid_names() {
  std::string out = "presets default, per_step, all; groups ";
  for (std::size_t i = 0; i < kGroupNames.size(); ++i) {
    if (i) out += ", ";
    out += kGroupNames[i];
  }
  return out;
}

}  // namespace

std::string_view span_group_name(SpanGroup group) {
  auto i = static_cast<std::size_t>(group);
  return i < kGroupNames.size() ? kGroupNames[i] : std::string_view("unknown");
}

SpanGroupSet SpanGroupSet::default_preset() {
  return of({SpanGroup::kJob, SpanGroup::kCheckpoint, SpanGroup::kEvaluate, SpanGroup::kInference});
}

SpanGroupSet SpanGroupSet::per_step_preset() {
  SpanGroupSet set = default_preset();
  for (auto g : {SpanGroup::kModelInit, SpanGroup::kLoadCheckpoint, SpanGroup::kStep,
                 SpanGroup::kForwardBackward, SpanGroup::kOptimizer, SpanGroup::kCommunication,
                 SpanGroup::kDataLoading})
    set.insert(g);
  return set;
}

SpanGroupSet SpanGroupSet::all() { return SpanGroupSet((1u << kSpanGroupCount) - 1); }

SpanGroupSet SpanGroupSet::parse(std::string_view spec, std::string_view setting) {
  SpanGroupSet set;
  std::size_t pos = 0;
  while (true) {
    std::size_t comma = spec.find(',', pos);
    std::string item = lowercase_trimmed(
        spec.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
    if (item.empty()) {
      throw ConfigError(std::string(setting) + "='" + std::string(spec) +
                        "': empty item in the list; accepted: " + valid_names());
    }
    if (item == "default") {
      set.bits_ |= default_preset().bits_;
    } else if (item == "per_step") {
      set.bits_ |= per_step_preset().bits_;
    } else if (item == "all") {
      set.bits_ |= all().bits_;
    } else {
      bool found = false;
      for (std::size_t i = 0; i < kGroupNames.size(); ++i) {
        if (kGroupNames[i] == item) {
          set.insert(static_cast<SpanGroup>(i));
          found = true;
        }
      }
      if (!found) {
        throw ConfigError(std::string(setting) + "='" + std::string(spec) +
                          "': unknown span group '" + item + "'; accepted: " + valid_names());
      }
    }
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return set;
}

std::string SpanGroupSet::to_string() const {
  std::string out;
  for (std::size_t i = 0; i < kGroupNames.size(); ++i) {
    if (!contains(static_cast<SpanGroup>(i))) continue;
    if (!out.empty()) out += ',';
    out += kGroupNames[i];
  }
  return out;
}

}  // namespace lens

namespace lens {

std::string SpanGroupSet::to_spec() const {
  std::string out;
  std::uint32_t rest = bits_;
  for (auto [name, preset] : {std::pair{"all", all()}, std::pair{"per_step", per_step_preset()},
                              std::pair{"default", default_preset()}}) {
    if ((bits_ & preset.bits_) == preset.bits_) {
      out = name;
      rest &= ~preset.bits_;
      break;
    }
  }
  for (std::size_t i = 0; i < kGroupNames.size(); ++i) {
    if (!((rest >> i) & 1u)) continue;
    if (!out.empty()) out += ',';
    out += kGroupNames[i];
  }
  return out.empty() ? "none" : out;
}

}  // namespace lens
