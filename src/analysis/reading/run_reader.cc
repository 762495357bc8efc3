#include "run_reader.h"

#include <algorithm>
#include <string.h>

#include <charconv>
#include <cstring>
#include <limits>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <simdjson.h>

#include "json_depth.h"
#include "lens/semconv.h"

namespace lens::analysis {

using json = nlohmann::json;

namespace {

// Eight ASCII digits read as one number, the first the most significant,
// or false when one of the bytes is not a digit (EightHex's test). A word
// at a time: each byte's digit value, then pairs, fours and the eight
// combined by three multiplications (the bytes are in memory order: the
// first in the low byte).
bool eight_digits(const char* p, std::uint64_t& value) {
  const EightHex eight(p);
  if (!eight.ascii() || eight.digits() != EightHex::kHigh) return false;
  std::uint64_t w = eight.word - EightHex::kOnes * '0';
  w = w * 10 + (w >> 8);  // each even byte: two digits
  const std::uint64_t pairs = 0x000000FF000000FFULL;
  w = ((w & pairs) * (100 + (1000000ULL << 32)) + ((w >> 16) & pairs) * (1 + (10000ULL << 32))) >>
      32;
  value = w;
  return true;
}

std::optional<std::int64_t> strict_int_by_from_chars(std::string_view text) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<std::int64_t> strict_int(std::string_view text) {
  // The common case, 1-19 digits after an optional '-' (a time in ns has
  // 19), read eight digits at a time; anything else (a byte that is not a
  // digit, more digits, a value out of range) is from_chars's to decide.
  const bool negative = !text.empty() && text.front() == '-';
  const char* p = text.data() + (negative ? 1 : 0);
  const std::size_t n = text.size() - (negative ? 1 : 0);
  if (n == 0 || n > 19) return strict_int_by_from_chars(text);
  std::uint64_t v = 0;  // below 10^19 < 2^64
  std::size_t i = 0;
  for (std::uint64_t eight; i + 8 <= n; i += 8) {
    if (!eight_digits(p + i, eight)) return strict_int_by_from_chars(text);
    v = v * 100000000 + eight;
  }
  for (; i < n; ++i) {
    const unsigned d = static_cast<unsigned char>(p[i]) - unsigned{'0'};
    if (d > 9) return strict_int_by_from_chars(text);
    v = v * 10 + d;
  }
  constexpr std::uint64_t kMax = std::numeric_limits<std::int64_t>::max();
  if (!negative) {
    if (v > kMax) return std::nullopt;
    return static_cast<std::int64_t>(v);
  }
  if (v > kMax + 1) return std::nullopt;
  return static_cast<std::int64_t>(0 - v);
}

std::int64_t SpanRow::int_attr(std::string_view key, std::int64_t fallback) const {
  const std::optional<std::string_view> text = attributes.text(key);
  return text ? strict_int(*text).value_or(fallback) : fallback;
}

RankFile RankFile::without_spans() const {
  RankFile m;
  m.path = path;
  m.rank = rank;
  m.world_size = world_size;
  m.run_id = run_id;
  m.service_name = service_name;
  m.trace_scope = trace_scope;
  m.export_filter = export_filter;
  m.replica = replica;
  m.tensor_rank = tensor_rank;
  m.process = process;
  m.resource = resource;
  m.resource_types = resource_types;
  m.lines = lines;
  m.warnings = warnings;
  return m;
}

std::size_t Run::span_count() const {
  std::size_t n = 0;
  for (const auto& f : files) n += f.spans.size();
  return n;
}

int Run::declared_world_size() const {
  int w = -1;
  for (const auto& f : files) w = std::max(w, f.world_size);
  return w;
}

namespace {

int resource_int(const std::map<std::string, std::string>& resource, const char* key) {
  auto it = resource.find(key);
  if (it == resource.end()) return -1;
  auto v = strict_int(it->second);
  if (!v || *v < 0 || *v > (1 << 30))
    throw std::runtime_error(std::string("resource attribute ") + key + "='" +
                             it->second.substr(0, 40) + "' is not a rank number");
  return static_cast<int>(*v);
}

}  // namespace

int take_resource(RankFile& file, const std::map<std::string, std::string>& resource) {
  const auto text = [&](const char* key, std::string& into) {
    if (auto it = resource.find(key); it != resource.end()) into = it->second;
  };
  const int rank = resource_int(resource, semconv::kRank);
  if (rank >= 0) file.rank = rank;
  if (int w = resource_int(resource, semconv::kWorldSize); w >= 0) file.world_size = w;
  // The run's id: Megatron's run uuid where the resource says one (its
  // nemo.run.id is random a process unless a run id was set), else
  // nemo.run.id: the importer's rule.
  for (const char* key : semconv::kRunIdAttributes)
    if (auto it = resource.find(key); it != resource.end()) {
      file.run_id = it->second;
      break;
    }
  text("service.name", file.service_name);
  text(semconv::kTraceScope, file.trace_scope);
  text(semconv::kExportFilter, file.export_filter);
  if (int dp = resource_int(resource, semconv::kDataRank); dp >= 0) file.replica = dp;
  if (int tp = resource_int(resource, semconv::kTensorRank); tp >= 0) file.tensor_rank = tp;
  for (const auto& [k, v] : resource) file.resource[k] = v;
  file.process = process_key(resource);
  return rank;
}

std::uint64_t process_key(const std::map<std::string, std::string>& resource) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over the values, each ended by a 0 byte
  for (const char* key :
       {"host.name", "process.pid", "service.instance.id", "lens.telemetry.start_unix_ns"}) {
    auto it = resource.find(key);
    if (it != resource.end())
      for (unsigned char c : it->second) h = (h ^ c) * 0x100000001b3ULL;
    h = (h ^ 0) * 0x100000001b3ULL;
  }
  return h;
}

namespace {

namespace dom = simdjson::dom;
using Type = dom::element_type;

// One parser per thread, reused line after line (its buffers grow to the
// longest line read), and a padded copy of the line (simdjson reads up to
// SIMDJSON_PADDING bytes past the end).
struct ThreadParser {
  ThreadParser() {
    // Nesting past kMaxJsonDepth is refused by the parse itself (the
    // capacity grows as lines need; the depth limit stays).
    if (parser.allocate(1 << 16, kMaxJsonDepth) != simdjson::SUCCESS) throw std::bad_alloc();
  }
  dom::parser parser;
  std::string padded;
};
ThreadParser& thread_parser() {
  thread_local ThreadParser p;
  return p;
}

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

std::string_view string_of(dom::element v, std::string_view what) {
  std::string_view s;
  if (v.get_string().get(s)) fail(std::string(what) + " is not a string");
  return s;
}

// A string member that proto3 JSON may leave out (null: empty).
std::string_view string_or_empty(dom::element v, std::string_view what) {
  return v.type() == Type::NULL_VALUE ? std::string_view() : string_of(v, what);
}

std::optional<std::int64_t> int_if(dom::element v) {
  if (v.type() == Type::INT64) return v.get_int64().value_unsafe();
  if (v.type() == Type::STRING) return strict_int(v.get_string().value_unsafe());
  return std::nullopt;
}

std::int64_t int_of(dom::element v, const char* what) {
  if (auto i = int_if(v)) return *i;
  fail(std::string(what) + " is not an integer");
}

std::int64_t nanos_of(dom::element v, const char* what) {
  const std::int64_t n = int_of(v, what);
  if (n < 0) fail(std::string(what) + " is negative");
  return n;
}

// A trace or span id of `hex_digits` hex digits, in either case; returned in
// lowercase. An empty id is "none" where `optional`; an id of zeros is
// invalid (OTel), except for a parent, where it also means "none".
HexId id_of(dom::element v, std::size_t hex_digits, const char* what, bool optional) {
  const std::string_view text = string_of(v, what);
  if (text.empty() && optional) return {};
  // Eight digits at a time, lowercased (the ids are 16 and 32 digits); any
  // byte that is not a digit leaves the loop for the words below.
  char lowered[HexId::kCapacity];
  if (text.size() == hex_digits && hex_digits <= HexId::kCapacity && hex_digits % 8 == 0) {
    std::uint64_t nonzero = 0;
    std::size_t i = 0;
    for (; i < text.size(); i += 8) {
      const auto eight = EightHex(text.data() + i).lowered();
      if (!eight) break;
      nonzero |= *eight ^ (EightHex::kOnes * '0');
      std::memcpy(lowered + i, &*eight, 8);
    }
    if (i == text.size()) {
      if (nonzero != 0) return HexId(std::string_view(lowered, text.size()));
      if (optional) return {};  // a parent of zeros: none
      fail(std::string(what) + " is all zeros (an invalid id)");
    }
  }
  // What is wrong with it: the first byte that is not a digit, else its
  // length; shown lowercased up to where reading stopped.
  const auto lower = [](char c) {
    const unsigned d = kHexValue[static_cast<unsigned char>(c)];
    return d < 16 ? kLowerHexDigits[d] : c;
  };
  std::size_t stop = 0;
  while (stop < text.size() && kHexValue[static_cast<unsigned char>(text[stop])] < 16) ++stop;
  std::string shown(text.substr(0, 40));
  for (std::size_t k = 0; k < std::min(stop, shown.size()); ++k) shown[k] = lower(shown[k]);
  shown = std::string(what) + " '" + shown + "'";
  if (stop < text.size()) fail(shown + " is not hex");
  fail(shown + " is not " + std::to_string(hex_digits) + " hex digits");
}

// An enum in proto3 JSON: its number, or its name (looked up in `names`).
int enum_of(dom::element v, std::initializer_list<std::string_view> names, const char* what) {
  if (v.type() == Type::STRING) {
    const std::string_view s = v.get_string().value_unsafe();
    int i = 0;
    for (auto n : names) {
      if (s == n) return i;
      ++i;
    }
  }
  return static_cast<int>(int_of(v, what));
}

// The object's member `key` (the last, when named twice, as the DOM
// reference reads it); false when it has none.
bool member(dom::element object, std::string_view key, dom::element& out) {
  bool found = false;
  const dom::object o = object.get_object().value_unsafe();
  for (dom::key_value_pair field : o)
    if (field.key == key) {
      out = field.value;
      found = true;
    }
  return found;
}

// An array member that proto3 JSON may leave out when empty (null too):
// calls `each` with every element.
template <typename Each>
void for_each_in(dom::element v, const char* key, Each&& each) {
  if (v.type() == Type::NULL_VALUE) return;
  if (v.type() != Type::ARRAY) fail(std::string(key) + " is not an array");
  const dom::array a = v.get_array().value_unsafe();
  for (dom::element e : a) each(e);
}

// An AnyValue's text and type. The text: stringValue, else intValue,
// boolValue, doubleValue (the shortest text that reads back as the same
// double, or NaN, Infinity, -Infinity), bytesValue, else the value's JSON
// (arrayValue, kvlistValue), "" for {}. The type: 'i' with an intValue,
// else 'b' with a boolValue, 'd' with a number doubleValue, else 's'. Only
// the member that gives the text must read. The text is the document's own
// where it can be, else made in `scratch`.
void any_value(dom::element v, std::string& scratch, std::string_view& text, char& type) {
  if (v.type() != Type::OBJECT) fail("attribute value is not an object");
  const dom::object o = v.get_object().value_unsafe();
  enum Member { kString, kInt, kBool, kDouble, kBytes, kMembers };
  dom::element member[kMembers];
  bool has[kMembers] = {}, other = false;
  for (dom::key_value_pair field : o) {
    const std::string_view key = field.key;
    int m = kMembers;
    if (key == "stringValue") m = kString;
    else if (key == "intValue") m = kInt;
    else if (key == "boolValue") m = kBool;
    else if (key == "doubleValue") m = kDouble;
    else if (key == "bytesValue") m = kBytes;
    if (m == kMembers) {
      other = true;
      continue;
    }
    has[m] = true;
    member[m] = field.value;
  }
  type = has[kInt]                                                          ? 'i'
         : has[kBool]                                                       ? 'b'
         : has[kDouble] && member[kDouble].type() != Type::STRING &&
                 member[kDouble].is_number()                                ? 'd'
                                                                            : 's';
  if (has[kString]) {
    text = string_of(member[kString], "stringValue");
  } else if (has[kInt]) {
    // In decimal as read back: "007" is 7.
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, int_of(member[kInt], "intValue"));
    text = scratch.assign(buf, r.ptr);
  } else if (has[kBool]) {
    bool b = false;
    if (member[kBool].get_bool().get(b)) fail("boolValue is not a boolean");
    text = b ? "true" : "false";
  } else if (has[kDouble]) {
    const dom::element d = member[kDouble];
    if (d.is_number()) {
      // The shortest text that reads back as the same double.
      char buf[32];
      const auto r = std::to_chars(buf, buf + sizeof buf, d.get_double().value_unsafe());
      text = scratch.assign(buf, r.ptr);
    } else {
      std::string_view s;
      if (d.get_string().get(s) || (s != "NaN" && s != "Infinity" && s != "-Infinity"))
        fail("doubleValue is not a number");
      text = s;
    }
  } else if (has[kBytes]) {
    text = string_of(member[kBytes], "bytesValue");
  } else if (other) {
    // arrayValue, kvlistValue: the value's JSON as the DOM reference prints
    // it (members sorted); rare, so parsed a second time. The line's depth
    // was checked before it was parsed.
    scratch =
        json::parse(simdjson::minify(v)).dump(-1, ' ', false, json::error_handler_t::replace);
    text = scratch;
  } else {
    text = {};  // {}: proto3 JSON's default value
  }
}

// A KeyValue of an attributes list: `store(key, text, type)` (an entry that
// is not an object is the key "" with the value "").
template <typename Store>
void key_value(dom::element kv, Store&& store) {
  std::string_view key, text;
  std::string scratch;
  char type = 's';
  if (kv.type() == Type::OBJECT) {
    dom::element value;
    bool has_value = false;
    const dom::object o = kv.get_object().value_unsafe();
    for (dom::key_value_pair field : o) {
      if (field.key == "key") {
        key = string_or_empty(field.value, "key");
      } else if (field.key == "value") {
        value = field.value;
        has_value = true;
      }
    }
    if (has_value) any_value(value, scratch, text, type);
  }
  store(key, text, type);
}

// A span's members; the errors in the order the DOM reference met them.
void span_of(dom::element v, SpanRow& row) {
  if (v.type() != Type::OBJECT) fail("a span has no traceId or spanId");
  const dom::object o = v.get_object().value_unsafe();
  dom::element trace, span, parent, name, start, end, kind, status, attributes, links;
  bool has_trace = false, has_span = false, has_parent = false, has_name = false,
       has_start = false, has_end = false, has_kind = false, has_status = false,
       has_attributes = false, has_links = false;
  for (dom::key_value_pair field : o) {
    const std::string_view k = field.key;
    if (k.size() < 4) continue;
    switch (k[0]) {
      case 't':
        if (k == "traceId") trace = field.value, has_trace = true;
        break;
      case 's':
        if (k == "spanId") span = field.value, has_span = true;
        else if (k == "startTimeUnixNano") start = field.value, has_start = true;
        else if (k == "status") status = field.value, has_status = true;
        break;
      case 'p':
        if (k == "parentSpanId") parent = field.value, has_parent = true;
        break;
      case 'n':
        if (k == "name") name = field.value, has_name = true;
        break;
      case 'e':
        if (k == "endTimeUnixNano") end = field.value, has_end = true;
        break;
      case 'k':
        if (k == "kind") kind = field.value, has_kind = true;
        break;
      case 'a':
        if (k == "attributes") attributes = field.value, has_attributes = true;
        break;
      case 'l':
        if (k == "links") links = field.value, has_links = true;
        break;
      default:
        break;
    }
  }
  if (!has_trace || !has_span) fail("a span has no traceId or spanId");
  row.trace_id = id_of(trace, 32, "traceId", false);
  row.span_id = id_of(span, 16, "spanId", false);
  if (has_parent) row.parent_span_id = id_of(parent, 16, "parentSpanId", true);
  if (has_name) row.name.assign(string_or_empty(name, "name"));
  if (has_start) row.start_ns = nanos_of(start, "startTimeUnixNano");
  if (has_end) row.end_ns = nanos_of(end, "endTimeUnixNano");
  if (has_kind)
    row.kind = enum_of(kind,
                       {"SPAN_KIND_UNSPECIFIED", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER",
                        "SPAN_KIND_CLIENT", "SPAN_KIND_PRODUCER", "SPAN_KIND_CONSUMER"},
                       "kind");
  if (has_status && status.type() == Type::OBJECT) {
    const dom::object st = status.get_object().value_unsafe();
    dom::element code, message;
    bool has_code = false, has_message = false;
    for (dom::key_value_pair f : st) {
      if (f.key == "code") code = f.value, has_code = true;
      else if (f.key == "message") message = f.value, has_message = true;
    }
    if (has_code)
      row.status_code =
          enum_of(code, {"STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"}, "status code");
    if (has_message) row.status_message.assign(string_or_empty(message, "message"));
  }
  if (has_attributes) {
    // Made in the thread's own buffers, then copied at their exact size.
    thread_local Attributes made;
    made.clear();
    for_each_in(attributes, "attributes", [&](dom::element kv) {
      key_value(kv, [&](std::string_view key, std::string_view text, char type) {
        made.set(key, text, type);
      });
    });
    row.attributes = made;
  }
  if (has_links)
    for_each_in(links, "links", [&](dom::element l) {
      dom::element t, id;
      if (l.type() != Type::OBJECT || !member(l, "traceId", t) || !member(l, "spanId", id))
        fail("a link has no traceId or spanId");
      const HexId trace_id = id_of(t, 32, "link traceId", false);
      row.links.emplace_back(trace_id, id_of(id, 16, "link spanId", false));
    });
}

// A resource's attributes flattened: each key's and text's size and bytes,
// and the type, in the order written.
void flatten_resource(dom::element attrs, std::string& flat) {
  flat.clear();
  const auto put = [&](std::string_view bytes) {
    const auto size = static_cast<std::uint32_t>(bytes.size());
    flat.append(reinterpret_cast<const char*>(&size), sizeof size);
    flat.append(bytes);
  };
  for_each_in(attrs, "attributes", [&](dom::element kv) {
    key_value(kv, [&](std::string_view key, std::string_view text, char type) {
      put(key);
      put(text);
      flat.push_back(type);
    });
  });
}

// One resourceSpans entry: its resource's fields on `file`, its spans
// appended to file.spans.
void resource_spans_of(dom::element rs, RankFile& file, std::string_view only) {
  if (rs.type() != Type::OBJECT) return;
  dom::element r, scopes, attrs;
  const bool has_attributes =
      member(rs, "resource", r) && r.type() == Type::OBJECT && member(r, "attributes", attrs);
  // The same resource as the one applied last is not applied again: the
  // same maps and fields would be set to what they hold. (A malformed one
  // is not the same: applied as below, it fails where it always did, with
  // what it set before that set.)
  thread_local std::string flat;
  bool same = false;
  try {
    if (has_attributes)
      flatten_resource(attrs, flat);
    else
      flat.clear();
    same = file.resource_seen.applied && flat == file.resource_seen.flat;
  } catch (const std::runtime_error&) {
  }
  int rank = file.resource_seen.rank;
  if (!same) {
    // Forgotten until applied whole: a resource that fails half-way has
    // changed the maps, and the next line's must be applied over them.
    file.resource_seen.applied = false;
    std::map<std::string, std::string> resource;
    if (has_attributes)
      for_each_in(attrs, "attributes", [&](dom::element kv) {
        key_value(kv, [&](std::string_view key, std::string_view text, char type) {
          resource[std::string(key)] = text;
          file.resource_types[std::string(key)] = type;
        });
      });
    rank = take_resource(file, resource);
    file.resource_seen.applied = true;
    file.resource_seen.flat = flat;
    file.resource_seen.rank = rank;
  }
  const std::uint64_t process = file.process;
  if (!member(rs, "scopeSpans", scopes)) return;
  for_each_in(scopes, "scopeSpans", [&](dom::element ss) {
    dom::element spans;
    if (ss.type() != Type::OBJECT || !member(ss, "spans", spans)) return;
    // Room for the scope's spans at once (the array's size is on its tape),
    // growing at least twofold, as push_back would.
    if (only.empty() && spans.type() == Type::ARRAY) {
      const std::size_t needed = file.spans.size() + spans.get_array().value_unsafe().size();
      if (needed > file.spans.capacity())
        file.spans.reserve(std::max(needed, 2 * file.spans.capacity()));
    }
    for_each_in(spans, "spans", [&](dom::element s) {
      if (!only.empty()) {
        dom::element name;
        std::string_view text;
        if (s.type() != Type::OBJECT || !member(s, "name", name) || name.get_string().get(text) ||
            text != only)
          return;
      }
      SpanRow& row = file.spans.emplace_back();
      row.rank = rank;
      row.process = process;
      span_of(s, row);
    });
  });
}

// A line's text parsed where it lies when `padded` (SIMDJSON_PADDING
// readable bytes follow it: LineReader's lines), else from a padded copy.
void parse_text(RankFile& file, std::string_view line, bool padded, std::string_view only) {
  ThreadParser& p = thread_parser();
  const char* text = line.data();
  if (!padded) {
    p.padded.reserve(line.size() + simdjson::SIMDJSON_PADDING);
    p.padded.assign(line);
    text = p.padded.data();
  }
  dom::element doc;
  if (const auto e = p.parser.parse(text, line.size(), false).get(doc)) {
    if (e == simdjson::DEPTH_ERROR)
      fail("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels (the reader's limit)");
    if (e == simdjson::MEMALLOC) throw std::bad_alloc();
    fail(std::string("not JSON: ") + simdjson::error_message(e));
  }
  if (doc.type() != Type::OBJECT) fail("the line is not a JSON object");
  dom::element rss;
  if (!member(doc, "resourceSpans", rss)) return;
  const std::size_t before = file.spans.size();
  try {
    for_each_in(rss, "resourceSpans",
                [&](dom::element rs) { resource_spans_of(rs, file, only); });
  } catch (...) {
    file.spans.resize(before);
    throw;
  }
}

}  // namespace

void parse_request(RankFile& file, const std::string& line) { parse_request(file, line, {}); }

void parse_request(RankFile& file, const std::string& line, std::string_view only) {
  // A string with room after it (its capacity) is parsed where it is.
  parse_text(file, line, line.capacity() >= line.size() + simdjson::SIMDJSON_PADDING, only);
}

RankFileReader::RankFileReader(const std::filesystem::path& path, std::size_t max_line_bytes)
    : in_(path, std::ios::binary),
      lines_(in_, max_line_bytes, simdjson::SIMDJSON_PADDING),
      max_line_bytes_(max_line_bytes) {
  file_.path = path;
  if (!in_) throw ReadError(path.string() + ": cannot open");
}

void RankFileReader::start_at(std::uint64_t offset, std::size_t line) {
  in_.seekg(static_cast<std::streamoff>(offset));
  if (!in_) throw ReadError(file_.path.string() + ": cannot seek to byte " + std::to_string(offset));
  number_ = line > 0 ? line - 1 : 0;
}

bool RankFileReader::next_line() {
  // A line longer than the file's buffer is gathered in one string per
  // thread, whichever file it comes from: its buffer is kept (and its room
  // for the parser), not made for each line.
  thread_local std::string gather;
  while (!done_) {
    std::string_view line;
    const LineReader::Status status = lines_.next(line, gather);
    if (status == LineReader::Status::kEnd) {
      done_ = true;
      break;
    }
    ++number_;
    const std::uintmax_t line_start = bytes_;
    bytes_ = lines_.bytes_read();
    if (status == LineReader::Status::kTooLong) {
      done_ = true;
      throw ReadError(file_.path.string() + ":" + std::to_string(number_) +
                      ": the line is longer than " + std::to_string(max_line_bytes_) +
                      " bytes (the reader's limit)");
    }
    const bool terminated = status == LineReader::Status::kLine;
    if (look_) look_(line, line_start, number_);
    if (line.empty()) continue;
    if (!needle_.empty() &&
        ::memmem(line.data(), line.size(), needle_.data(), needle_.size()) == nullptr)
      continue;
    try {
      parse_text(file_, line, true, needle_);
      ++file_.lines;
      return true;
    } catch (const std::bad_alloc&) {
      throw ReadError(file_.path.string() + ":" + std::to_string(number_) + ": out of memory (" +
                      std::to_string(line.size()) + " bytes on this line)");
    } catch (const std::exception& e) {
      if (!terminated) {
        file_.warnings.push_back(file_.path.string() + ":" + std::to_string(number_) +
                                 ": skipped an incomplete last line (the process stopped while "
                                 "writing it)");
        done_ = true;
        break;
      }
      throw ReadError(file_.path.string() + ":" + std::to_string(number_) +
                      ": not an OTLP/JSON request: " + e.what());
    }
  }
  return false;
}

Run read_run(const OpenedRun& opened,
             const std::function<void(std::size_t, std::size_t)>& progress) {
  Run run;
  run.dir = opened.input();
  const auto& paths = opened.files();
  for (std::size_t i = 0; i < paths.size(); ++i) {
    RankFileReader reader(paths[i]);
    while (reader.next_line()) {
    }
    run.files.push_back(reader.take());
    if (progress) progress(i + 1, paths.size());
  }
  std::sort(run.files.begin(), run.files.end(),
            [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });
  return run;
}

}  // namespace lens::analysis
