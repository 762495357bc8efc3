// A run's spans as columns, one row per span, for a DataFrame
// (lens.analysis.read_run in the Python package): who recorded it (rank,
// replica, tensor rank, stage), where in the schedule (step, microbatch,
// model chunk), what (name, kind), when (start and end on rank 0's clock
// unless raw, as `lens analyze` puts them), its ids, and the attributes
// asked for. Read with the step stream (step_stream.h) and the clock
// alignment of every view.
//
// Columns, not rows of objects: numbers in plain arrays, a name, kind or
// attribute value once in its column's dictionary and a code a row, an id
// as its fixed-width text in one buffer; so the table takes about 150 bytes
// a span whatever the names, and the Python module hands each column to
// numpy whole.
//
// Thread safety: plain functions and values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "opened_run.h"

namespace lens::analysis {

// Texts each kept once: a row holds its text's code.
class TextDictionary {
 public:
  std::int32_t code(std::string_view text);
  const std::vector<std::string>& texts() const { return texts_; }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::string> texts_;
  std::unordered_map<std::string, std::int32_t, Hash, std::equal_to<>> codes_;
};

// Ids of one width, each as its text padded with NULs to the width.
struct IdColumn {
  std::size_t width = 0;
  std::string bytes;  // width bytes a row
  void add(std::string_view id);
};

// An attribute asked for, a row each: its value's code in `values` (typed
// as span_attributes.h's types: the text after one type character), -1
// where the span has none.
struct AttributeColumn {
  std::string key;
  std::vector<std::int32_t> value;
  TextDictionary values;
};

struct SpanTable {
  // -1 where a span has none: stage (a span outside every step), step,
  // microbatch, chunk.
  std::vector<std::int64_t> rank, replica, tensor, stage;
  std::vector<std::int64_t> step, microbatch, chunk;
  std::vector<std::int32_t> name, kind;  // codes; kind: span_kind.h's kind_name
  TextDictionary names, kinds;
  std::vector<std::int64_t> start_ns, end_ns;
  std::vector<std::uint8_t> aligned;  // on the reference clock (its process had samples)
  IdColumn trace_id{32, {}}, span_id{16, {}}, parent_span_id{16, {}};
  std::vector<std::int64_t> links, status_code;
  std::vector<AttributeColumn> attributes;

  std::size_t size() const { return name.size(); }
};

// ReadError for a bad run, as every view. `attribute_keys`: the span
// attributes to add as columns.
SpanTable read_span_table(const OpenedRun& run, bool raw_clock,
                          std::vector<std::string>* warnings,
                          const std::vector<std::string>& attribute_keys = {});

}  // namespace lens::analysis
