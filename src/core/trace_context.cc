#include "lens/trace_context.h"

#include <algorithm>
#include <vector>

#include "hex.h"

namespace lens {
namespace {

constexpr std::size_t kTraceparentV00Size = 55;
constexpr std::size_t kMaxTracestateMembers = 32;

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool is_lcalpha(char c) { return c >= 'a' && c <= 'z'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_key_char(char c) {
  return is_lcalpha(c) || is_digit(c) || c == '_' || c == '-' || c == '*' || c == '/';
}

}  // namespace

std::optional<SpanContext> parse_traceparent(std::string_view header) {
  header = trim_ows(header);
  if (header.size() < kTraceparentV00Size) return std::nullopt;

  std::uint8_t version = 0;
  if (!detail::decode_lower_hex(header.substr(0, 2), &version, 1)) return std::nullopt;
  if (version == 0xff) return std::nullopt;
  if (version == 0x00 && header.size() != kTraceparentV00Size) return std::nullopt;
  // A future version may append fields, but only after another '-'.
  if (header.size() > kTraceparentV00Size && header[kTraceparentV00Size] != '-')
    return std::nullopt;
  if (header[2] != '-' || header[35] != '-' || header[52] != '-') return std::nullopt;

  auto trace_id = TraceId::from_hex(header.substr(3, 32));
  auto span_id = SpanId::from_hex(header.substr(36, 16));
  std::uint8_t flags = 0;
  if (!trace_id || !span_id || !detail::decode_lower_hex(header.substr(53, 2), &flags, 1))
    return std::nullopt;
  if (!trace_id->valid() || !span_id->valid()) return std::nullopt;

  SpanContext ctx;
  ctx.trace_id = *trace_id;
  ctx.span_id = *span_id;
  ctx.trace_flags = flags;
  ctx.remote = true;
  return ctx;
}

std::string format_traceparent(const SpanContext& context) {
  std::string out(kTraceparentV00Size, '-');
  out[0] = '0';
  out[1] = '0';
  context.trace_id.write_hex(out.data() + 3);
  context.span_id.write_hex(out.data() + 36);
  detail::encode_lower_hex(&context.trace_flags, 1, out.data() + 53);
  return out;
}

bool valid_tracestate_key(std::string_view key) {
  // key = ( lcalpha / DIGIT ) 0*255 ( keychar )
  // keychar = lcalpha / DIGIT / "_" / "-" / "*" / "/" / "@"
  if (key.empty() || key.size() > 256) return false;
  if (!is_lcalpha(key[0]) && !is_digit(key[0])) return false;
  for (char c : key.substr(1))
    if (!is_key_char(c) && c != '@') return false;
  return true;
}

bool valid_tracestate_value(std::string_view value) {
  // value = 0*255(chr) nblk-chr ; chr = %x20 / nblk-chr
  // nblk-chr = %x21-2B / %x2D-3C / %x3E-7E
  if (value.empty() || value.size() > 256) return false;
  for (char c : value) {
    if (c < 0x20 || c > 0x7e || c == ',' || c == '=') return false;
  }
  return value.back() != ' ';
}

std::string sanitize_tracestate(std::string_view header) {
  // Any invalid member, or more than 32 distinct keys, invalidates the whole
  // value: it is then not propagated at all. A repeated key keeps its first
  // member; the later ones are dropped.
  std::vector<std::string_view> keys;
  std::string out;
  std::size_t pos = 0;
  while (pos <= header.size()) {
    std::size_t comma = header.find(',', pos);
    if (comma == std::string_view::npos) comma = header.size();
    std::string_view member = trim_ows(header.substr(pos, comma - pos));
    pos = comma + 1;
    if (member.empty()) continue;  // empty list members are allowed
    const auto eq = member.find('=');
    if (eq == std::string_view::npos) return {};
    const std::string_view key = member.substr(0, eq);
    if (!valid_tracestate_key(key) || !valid_tracestate_value(member.substr(eq + 1))) return {};
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    keys.push_back(key);
    if (keys.size() > kMaxTracestateMembers) return {};
    if (!out.empty()) out.push_back(',');
    out.append(member);
  }
  return out;
}

std::optional<SpanContext> parse_trace_context(std::string_view traceparent,
                                               std::string_view tracestate) {
  auto ctx = parse_traceparent(traceparent);
  if (ctx) ctx->tracestate = sanitize_tracestate(tracestate);
  return ctx;
}

}  // namespace lens
