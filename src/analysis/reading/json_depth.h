// How deeply a JSON text nests its objects and arrays, found by one scan of
// the bytes, before anything parses or prints it: code that walks parsed
// JSON (printing a value, destroying it) recurses once per level, so a line
// of 100,000 nested brackets must be refused before it gets there.
//
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <string_view>

namespace lens::analysis {

// The deepest nesting a lens reader accepts. An OTLP/JSON span attribute
// sits 10 levels down (resourceSpans, scopeSpans, spans, attributes, value
// and the objects between them); 64 leaves room for array and key-value
// list values.
inline constexpr std::size_t kMaxJsonDepth = 64;

// True when `text` nests objects and arrays no deeper than `max_depth`.
// Brackets inside strings do not count. The text need not be valid JSON.
bool json_depth_within(std::string_view text, std::size_t max_depth = kMaxJsonDepth);

}  // namespace lens::analysis
