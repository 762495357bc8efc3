// PipelineView: a run's spans arranged by step and rank, with each span's
// kind (forward, backward, p2p, linked, optimizer, ...), for the `lens`
// command's check, summary, timeline and exports.
//
// A span belongs to step s on rank r when it is on rank r and in the trace
// of rank r's megatron.train_step span for step s (dl.step).
#pragma once

#include <algorithm>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "run_reader.h"
#include "span_kind.h"

namespace lens::analysis {

struct StepOnRank {
  int rank = -1;
  int stage = -1;
  const SpanRow* step_span = nullptr;
  std::vector<const SpanRow*> spans;  // the step's spans on this rank, step span included
};

struct StepView {
  std::int64_t step = 0;
  std::map<int, StepOnRank> ranks;  // by rank
};

// Values by span id, in id order; of an id added twice, the later value.
// One sorted array rather than a tree node per span (a run has millions);
// the ids are the rows' own, valid while the rows are.
template <typename V>
class IdIndex {
 public:
  using Entry = std::pair<std::string_view, V>;
  using const_iterator = typename std::vector<Entry>::const_iterator;

  void add(std::string_view id, V value) { entries_.emplace_back(id, std::move(value)); }
  // After the last add: sorts, and keeps the last value of each id.
  void seal() {
    std::stable_sort(entries_.begin(), entries_.end(),
                     [](const Entry& a, const Entry& b) { return id_less(a.first, b.first); });
    auto out = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      const auto next = std::next(it);
      if (next != entries_.end() && next->first == it->first) continue;
      *out++ = std::move(*it);
    }
    entries_.erase(out, entries_.end());
  }

  const_iterator begin() const { return entries_.begin(); }
  const_iterator end() const { return entries_.end(); }
  std::size_t size() const { return entries_.size(); }
  const_iterator find(std::string_view id) const {
    const auto it = std::lower_bound(
        entries_.begin(), entries_.end(), id,
        [](const Entry& e, std::string_view key) { return id_less(e.first, key); });
    return it != entries_.end() && it->first == id ? it : entries_.end();
  }
  std::size_t count(std::string_view id) const { return find(id) != end() ? 1 : 0; }
  // std::out_of_range when absent.
  const V& at(std::string_view id) const {
    const auto it = find(id);
    if (it == end()) throw std::out_of_range("no span " + std::string(id) + " in the run");
    return it->second;
  }

 private:
  std::vector<Entry> entries_;
};

// Each span of a run by its span id.
using SpanIndex = IdIndex<const SpanRow*>;

struct PipelineView {
  int pipeline_stages = 0;      // from dl.pipeline_parallel.size, else the largest stage + 1
  int microbatches = 0;         // from dl.num_microbatches, else forward spans per step on stage 0
  int virtual_stages = 1;       // model chunks per stage, from dl.virtual_pipeline.size
  std::vector<int> ranks;       // ranks with a file
  std::vector<StepView> steps;  // by step number
  SpanIndex by_span_id;
};

PipelineView build_view(const Run& run);

// A step span's stage: its dl.pipeline_parallel.rank, else its rank.
int stage_of_step_span(const SpanRow& step_span);

// The schedule's idle share of the forward-backward window: (P-1) slots of
// one chunk's forward + backward against V M of them busy (Megatron's
// (P-1)/(VM) of the ideal time); -1 when P or M is unknown. And its formula
// as the reports print it.
double theoretical_bubble(int stages, int microbatches, int virtual_stages);
const char* theoretical_bubble_formula(int virtual_stages);

}  // namespace lens::analysis
