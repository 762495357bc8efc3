#include "run_import.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>

#include "console_spans.h"
#include "json_depth.h"
#include "line_reader.h"
#include "rank_order.h"
#include "run_reader.h"
#include "upstream_steps.h"

namespace lens::analysis {

using json = nlohmann::json;

namespace {

constexpr std::array<unsigned char, 4> kZstdMagic = {0x28, 0xB5, 0x2F, 0xFD};
constexpr std::size_t kMaxRecordBytes = kMaxLineBytes;  // one record, decompressed too
constexpr std::uintmax_t kMaxDocumentBytes = std::uintmax_t{1} << 30;  // a pretty-printed document
constexpr int kMaxProtoDepth = 32;                                     // nested AnyValues

bool starts_with_zstd(const std::string& bytes) {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), kZstdMagic.data(), 4) == 0;
}

// ---- ids: hex, or base64 (proto3 JSON's bytes) --------------------------

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

std::string to_hex(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    out += kLowerHexDigits[c >> 4];
    out += kLowerHexDigits[c & 15];
  }
  return out;
}

// An id as lens reads it: `bytes` long, in hex. Hex of the right length is
// kept; base64 decoding to `bytes` bytes is turned into hex; anything else
// is left for the reader to reject with its own message.
std::string normal_id(const std::string& id, std::size_t bytes) {
  if (id.size() == 2 * bytes || id.empty()) return id;
  std::string raw;
  unsigned buffer = 0;
  int bits = 0;
  for (char c : id) {
    if (c == '=') break;
    const int v = base64_value(c);
    if (v < 0) return id;
    buffer = (buffer << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      raw += static_cast<char>((buffer >> bits) & 0xFF);
    }
  }
  return raw.size() == bytes ? to_hex(raw) : id;
}

void normalize_id(json& object, const char* key, std::size_t bytes) {
  auto it = object.find(key);
  if (it != object.end() && it->is_string()) *it = normal_id(it->get<std::string>(), bytes);
}

// ---- protobuf (the collector's `proto` format) ---------------------------

class ProtoReader {
 public:
  ProtoReader(const char* data, std::size_t size) : p_(data), end_(data + size) {}
  bool done() const { return p_ >= end_; }
  // The next field's number and wire type.
  std::pair<std::uint32_t, int> tag() {
    const std::uint64_t t = varint();
    if ((t >> 3) == 0 || (t >> 3) > 0x1FFFFFFF) fail("a field number out of range");
    return {static_cast<std::uint32_t>(t >> 3), static_cast<int>(t & 7)};
  }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) fail("a varint runs past the end of its message");
      const auto b = static_cast<unsigned char>(*p_++);
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return v;
    }
    fail("a varint longer than 10 bytes");
  }
  std::uint64_t fixed64() {
    if (end_ - p_ < 8) fail("a fixed64 runs past the end of its message");
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(p_[i])) << (8 * i);
    p_ += 8;
    return v;
  }
  std::string_view bytes() {
    const std::uint64_t n = varint();
    if (n > static_cast<std::uint64_t>(end_ - p_))
      fail("a length runs past the end of its message");
    std::string_view v(p_, static_cast<std::size_t>(n));
    p_ += n;
    return v;
  }
  void skip(int wire) {
    switch (wire) {
      case 0:
        varint();
        return;
      case 1:
        fixed64();
        return;
      case 2:
        bytes();
        return;
      case 5:
        if (end_ - p_ < 4) fail("a fixed32 runs past the end of its message");
        p_ += 4;
        return;
      default:
        fail("wire type " + std::to_string(wire) + " (groups are not OTLP)");
    }
  }
  [[noreturn]] static void fail(const std::string& what) {
    throw std::runtime_error("not an OTLP protobuf message: " + what);
  }

 private:
  const char* p_;
  const char* end_;
};

void expect_wire(int wire, int want, const char* field) {
  if (wire != want)
    ProtoReader::fail(std::string(field) + " has wire type " + std::to_string(wire));
}

json any_value(std::string_view data, int depth);

json key_value(std::string_view data, int depth) {
  ProtoReader r(data.data(), data.size());
  json kv = {{"key", ""}, {"value", json::object()}};
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    if (field == 1) {
      expect_wire(wire, 2, "KeyValue.key");
      kv["key"] = std::string(r.bytes());
    } else if (field == 2) {
      expect_wire(wire, 2, "KeyValue.value");
      kv["value"] = any_value(r.bytes(), depth + 1);
    } else {
      r.skip(wire);
    }
  }
  return kv;
}

json any_value(std::string_view data, int depth) {
  if (depth > kMaxProtoDepth) ProtoReader::fail("values nested deeper than 32");
  ProtoReader r(data.data(), data.size());
  json v = json::object();
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    switch (field) {
      case 1:
        expect_wire(wire, 2, "AnyValue.string_value");
        v = {{"stringValue", std::string(r.bytes())}};
        break;
      case 2:
        expect_wire(wire, 0, "AnyValue.bool_value");
        v = {{"boolValue", r.varint() != 0}};
        break;
      case 3:
        expect_wire(wire, 0, "AnyValue.int_value");
        v = {{"intValue", std::to_string(static_cast<std::int64_t>(r.varint()))}};
        break;
      case 4: {
        expect_wire(wire, 1, "AnyValue.double_value");
        const std::uint64_t bits = r.fixed64();
        double d = 0;
        std::memcpy(&d, &bits, sizeof d);
        if (d != d)
          v = {{"doubleValue", "NaN"}};
        else if (d > 1.7976931348623157e308 || d < -1.7976931348623157e308)
          v = {{"doubleValue", d > 0 ? "Infinity" : "-Infinity"}};
        else
          v = {{"doubleValue", d}};
        break;
      }
      case 5:
      case 6: {
        expect_wire(wire, 2, "AnyValue.array_value");
        const std::string_view inner = r.bytes();
        ProtoReader items(inner.data(), inner.size());
        json list = json::array();
        while (!items.done()) {
          const auto [f, w] = items.tag();
          if (f != 1) {
            items.skip(w);
            continue;
          }
          expect_wire(w, 2, "a list's item");
          list.push_back(field == 5 ? any_value(items.bytes(), depth + 1)
                                    : key_value(items.bytes(), depth + 1));
        }
        v = field == 5 ? json{{"arrayValue", {{"values", list}}}}
                       : json{{"kvlistValue", {{"values", list}}}};
        break;
      }
      case 7:
        expect_wire(wire, 2, "AnyValue.bytes_value");
        v = {{"bytesValue", to_hex(r.bytes())}};
        break;
      default:
        r.skip(wire);
    }
  }
  return v;
}

json attributes(std::vector<std::string_view> items) {
  json out = json::array();
  for (auto item : items) out.push_back(key_value(item, 0));
  return out;
}

json link_of(std::string_view data) {
  ProtoReader r(data.data(), data.size());
  json l = json::object();
  std::vector<std::string_view> attrs;
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    if (field == 1 || field == 2) {
      expect_wire(wire, 2, "Link id");
      l[field == 1 ? "traceId" : "spanId"] = to_hex(r.bytes());
    } else if (field == 4) {
      expect_wire(wire, 2, "Link.attributes");
      attrs.push_back(r.bytes());
    } else {
      r.skip(wire);
    }
  }
  l["attributes"] = attributes(attrs);
  return l;
}

json span_of(std::string_view data) {
  ProtoReader r(data.data(), data.size());
  json s = json::object();
  std::vector<std::string_view> attrs;
  json links = json::array();
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    switch (field) {
      case 1:
      case 2:
      case 4:
        expect_wire(wire, 2, "Span id");
        s[field == 1 ? "traceId" : field == 2 ? "spanId" : "parentSpanId"] = to_hex(r.bytes());
        break;
      case 5:
        expect_wire(wire, 2, "Span.name");
        s["name"] = std::string(r.bytes());
        break;
      case 6:
        expect_wire(wire, 0, "Span.kind");
        s["kind"] = static_cast<std::int64_t>(r.varint() & 0xFFFFFFFF);
        break;
      case 7:
      case 8:
        expect_wire(wire, 1, "Span time");
        s[field == 7 ? "startTimeUnixNano" : "endTimeUnixNano"] = std::to_string(r.fixed64());
        break;
      case 9:
        expect_wire(wire, 2, "Span.attributes");
        attrs.push_back(r.bytes());
        break;
      case 13:
        expect_wire(wire, 2, "Span.links");
        links.push_back(link_of(r.bytes()));
        break;
      case 15: {
        expect_wire(wire, 2, "Span.status");
        const std::string_view st = r.bytes();
        ProtoReader sr(st.data(), st.size());
        json status = json::object();
        while (!sr.done()) {
          const auto [f, w] = sr.tag();
          if (f == 2) {
            expect_wire(w, 2, "Status.message");
            status["message"] = std::string(sr.bytes());
          } else if (f == 3) {
            expect_wire(w, 0, "Status.code");
            status["code"] = static_cast<std::int64_t>(sr.varint() & 0xFFFFFFFF);
          } else {
            sr.skip(w);
          }
        }
        s["status"] = status;
        break;
      }
      default:
        r.skip(wire);
    }
  }
  s["attributes"] = attributes(attrs);
  s["links"] = links;
  return s;
}

// An ExportTraceServiceRequest in protobuf, as OTLP JSON.
json request_of_proto(std::string_view data) {
  ProtoReader r(data.data(), data.size());
  json resource_spans = json::array();
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    if (field != 1) {
      r.skip(wire);
      continue;
    }
    expect_wire(wire, 2, "resource_spans");
    const std::string_view rs_bytes = r.bytes();
    ProtoReader rs(rs_bytes.data(), rs_bytes.size());
    json out = {{"resource", {{"attributes", json::array()}}}, {"scopeSpans", json::array()}};
    while (!rs.done()) {
      const auto [f, w] = rs.tag();
      if (f == 1) {
        expect_wire(w, 2, "ResourceSpans.resource");
        const std::string_view res = rs.bytes();
        ProtoReader rr(res.data(), res.size());
        std::vector<std::string_view> attrs;
        while (!rr.done()) {
          const auto [rf, rw] = rr.tag();
          if (rf == 1) {
            expect_wire(rw, 2, "Resource.attributes");
            attrs.push_back(rr.bytes());
          } else {
            rr.skip(rw);
          }
        }
        out["resource"]["attributes"] = attributes(attrs);
      } else if (f == 2) {
        expect_wire(w, 2, "ResourceSpans.scope_spans");
        const std::string_view ss_bytes = rs.bytes();
        ProtoReader ss(ss_bytes.data(), ss_bytes.size());
        json scope = {{"spans", json::array()}};
        while (!ss.done()) {
          const auto [sf, sw] = ss.tag();
          if (sf == 2) {
            expect_wire(sw, 2, "ScopeSpans.spans");
            scope["spans"].push_back(span_of(ss.bytes()));
          } else {
            ss.skip(sw);
          }
        }
        out["scopeSpans"].push_back(std::move(scope));
      } else {
        rs.skip(w);
      }
    }
    resource_spans.push_back(std::move(out));
  }
  return {{"resourceSpans", std::move(resource_spans)}};
}

// ---- zstd ----------------------------------------------------------------

// One zstd frame (or several back to back), at most kMaxRecordBytes out.
std::string unzstd(std::string_view in) {
  std::unique_ptr<ZSTD_DStream, decltype(&ZSTD_freeDStream)> z(ZSTD_createDStream(),
                                                               &ZSTD_freeDStream);
  if (!z) throw std::bad_alloc();
  ZSTD_initDStream(z.get());
  std::string out;
  std::vector<char> buffer(ZSTD_DStreamOutSize());
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  std::size_t last = 1;
  while (input.pos < input.size) {
    ZSTD_outBuffer output{buffer.data(), buffer.size(), 0};
    last = ZSTD_decompressStream(z.get(), &output, &input);
    if (ZSTD_isError(last))
      throw std::runtime_error(std::string("not a zstd frame: ") + ZSTD_getErrorName(last));
    out.append(buffer.data(), output.pos);
    if (out.size() > kMaxRecordBytes)
      throw std::runtime_error("a zstd frame decompresses to more than " +
                               std::to_string(kMaxRecordBytes) + " bytes (the reader's limit)");
  }
  if (last != 0) throw std::runtime_error("a truncated zstd frame");
  return out;
}

// A whole file compressed as one zstd stream, decompressed into `to`.
void unzstd_file(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary);
  std::unique_ptr<ZSTD_DStream, decltype(&ZSTD_freeDStream)> z(ZSTD_createDStream(),
                                                               &ZSTD_freeDStream);
  ZSTD_initDStream(z.get());
  std::vector<char> in_buffer(ZSTD_DStreamInSize()), out_buffer(ZSTD_DStreamOutSize());
  std::size_t last = 0;
  std::uintmax_t offset = 0;
  while (in) {
    in.read(in_buffer.data(), static_cast<std::streamsize>(in_buffer.size()));
    const auto got = static_cast<std::size_t>(in.gcount());
    if (got == 0) break;
    ZSTD_inBuffer input{in_buffer.data(), got, 0};
    while (input.pos < input.size) {
      ZSTD_outBuffer output{out_buffer.data(), out_buffer.size(), 0};
      last = ZSTD_decompressStream(z.get(), &output, &input);
      if (ZSTD_isError(last))
        throw ReadError(from.string() + ": offset " + std::to_string(offset + input.pos) +
                        ": not a zstd stream: " + ZSTD_getErrorName(last));
      out.write(out_buffer.data(), static_cast<std::streamsize>(output.pos));
    }
    offset += got;
  }
  if (last != 0)
    throw ReadError(from.string() + ": offset " + std::to_string(offset) +
                    ": the zstd stream is truncated (its last frame is incomplete)");
  if (!out) throw ReadError(to.string() + ": cannot write the decompressed copy");
}

// ---- the import ----------------------------------------------------------

struct Batch {
  std::uint64_t offset = 0;
  std::uint32_t size = 0;
  std::int64_t first_end = 0;
};

struct RankSpill {
  std::ofstream out;
  std::uint64_t bytes = 0;
  std::vector<Batch> batches;
};

class Importer {
 public:
  explicit Importer(std::filesystem::path out_dir) : dir_(std::move(out_dir)) {}

  void file(const std::filesystem::path& path) {
    ++stats_.files;
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ReadError(path.string() + ": cannot open");
    std::string head(4, '\0');
    in.read(head.data(), 4);
    head.resize(static_cast<std::size_t>(in.gcount()));
    in.close();
    if (starts_with_zstd(head)) {
      // A zstd stream of records or lines: decompressed to disk, then read.
      const std::filesystem::path plain = dir_ / ("decompressed-" + std::to_string(++scratch_));
      unzstd_file(path, plain);
      contents(plain, path);
      std::filesystem::remove(plain);
      return;
    }
    contents(path, path);
  }

  ImportStats finish() {
    if (run_.empty() && runs_.size() > 1) {
      std::string names;
      for (const auto& [id, spans] : runs_)
        names += (names.empty() ? "" : ", ") + id + " (" + std::to_string(spans) + " spans)";
      throw ReadError("the traces hold " + std::to_string(runs_.size()) +
                      " runs by their run id (" + kRunIdAttributes[0] + " or " +
                      kRunIdAttributes[1] + "): " + names + "; name one with --run ID");
    }
    if (!run_.empty() && !runs_.count(run_)) {
      std::string names;
      for (const auto& [id, spans] : runs_) names += (names.empty() ? "" : ", ") + id;
      throw ReadError("no run " + run_ + " in the traces (" +
                      (names.empty() ? std::string("they carry no run id") : "runs: " + names) +
                      ")");
    }
    if (!run_.empty() && runs_.size() > 1)
      stats_.warnings.push_back("read run " + run_ + " of the " + std::to_string(runs_.size()) +
                                " runs the traces hold");
    std::size_t p2p = 0, microbatch = 0;
    for (auto& [rank, spill] : spills_) {
      spill.out.close();
      if (!spill.out) throw ReadError((dir_ / spill_name(rank)).string() + ": cannot write");
      std::stable_sort(spill.batches.begin(), spill.batches.end(),
                       [](const Batch& a, const Batch& b) { return a.first_end < b.first_end; });
      std::ifstream in(dir_ / spill_name(rank), std::ios::binary);
      std::ofstream out(dir_ / ("rank-" + std::to_string(rank) + ".otlp.jsonl"), std::ios::binary);
      std::string line;
      // Megatron-LM's own traces: correlated as they are written.
      UpstreamSteps* upstream = nullptr;
      if (upstream_ranks_.count(rank))
        upstream = &upstream_.try_emplace(rank, order_).first->second;
      std::vector<std::string> lines;
      for (const Batch& b : spill.batches) {
        line.resize(b.size);
        in.seekg(static_cast<std::streamoff>(b.offset));
        in.read(line.data(), b.size);
        if (!upstream) {
          out << line << '\n';
          continue;
        }
        upstream->add(json::parse(line), lines);
        for (const auto& l : lines) out << l << '\n';
        lines.clear();
      }
      if (upstream) {
        upstream->finish(lines);
        for (const auto& l : lines) out << l << '\n';
        for (const auto& note : upstream->notes()) stats_.warnings.push_back(note);
        p2p += upstream->p2p_spans();
        microbatch += upstream->microbatch_spans();
        for (std::size_t k = 0; k < 4; ++k) {
          scheduled_[k] += upstream->scheduled_transfers()[k];
          untraced_[k] += upstream->untraced_transfers()[k];
        }
      }
      if (!in || !out)
        throw ReadError(dir_.string() + ": cannot write rank " + std::to_string(rank));
      in.close();
      std::filesystem::remove(dir_ / spill_name(rank));
    }
    if (!upstream_ranks_.empty()) {
      upstream_warnings(p2p, microbatch);
      if (p2p > 0) message_clocks();
    }
    if (stats_.foreign_spans > 0)
      stats_.warnings.push_back(std::to_string(stats_.foreign_spans) +
                                " spans of resources without dl.rank (not a lens rank: another "
                                "service's) were left out");
    return std::move(stats_);
  }

 private:
  static std::string spill_name(int rank) { return "rank-" + std::to_string(rank) + ".batches"; }

  // What an upstream run lacks, and the setting that would give it.
  void upstream_warnings(std::size_t p2p, std::size_t microbatch) {
    stats_.upstream_ranks = upstream_ranks_.size();
    stats_.warnings.push_back(std::string("inferred: ") + kInferredWhat + " (rank order " +
                              order_ + "; each rank's iterations in traces of their own)");
    if (upstream_world_ > 0 && static_cast<int>(upstream_ranks_.size()) < upstream_world_) {
      std::string which;
      for (int r : upstream_ranks_) which += (which.empty() ? "" : ", ") + std::to_string(r);
      stats_.warnings.push_back(
          "missing: " + std::to_string(upstream_world_ - static_cast<int>(upstream_ranks_.size())) +
          " of " + std::to_string(upstream_world_) + " ranks (only rank " + which +
          " exported; Megatron's default export strategy exports the last rank): set "
          "MEGATRON_OTEL_EXPORT_STRATEGY=all_ranks for the whole pipeline");
    }
    if (p2p == 0)
      stats_.warnings.push_back(
          "missing: no megatron.p2p spans, so waits and transfers cannot be told from compute: "
          "enable the communication span group (MEGATRON_OTEL_SPAN_GROUPS=per_step,microbatch,"
          "communication)");
    if (p2p > 0) untraced_warning();
    if (microbatch == 0)
      stats_.warnings.push_back(
          "missing: no megatron.microbatch spans, so no step can be explained: enable the "
          "microbatch span group (MEGATRON_OTEL_SPAN_GROUPS=per_step,microbatch)");
    if (log_lines_ > 0)
      stats_.warnings.push_back(std::to_string(log_lines_) +
                                " lines that are not spans (the process's own output) were passed "
                                "over");
  }

  // Upstream traces carry no clock samples: each rank of rank 0's pipeline
  // gets one inferred from its matched messages, appended to its file.
  void message_clocks() {
    std::vector<const UpstreamSteps*> ranks;
    for (const auto& [rank, up] : upstream_) ranks.push_back(&up);
    const MessageClocks m = clocks_from_messages(ranks);
    std::int64_t widest = 0;
    std::size_t messages = 0, contradicted = 0;
    for (const MessageClock& c : m.clocks) {
      const UpstreamSteps& up = upstream_.at(c.rank);
      std::int64_t first = 0, last = 0;
      for (std::size_t i = 0; i < up.transfers().size(); ++i) {
        const std::int64_t t = up.transfers()[i].at_ns;
        first = i == 0 ? t : std::min(first, t);
        last = i == 0 ? t : std::max(last, t);
      }
      std::ofstream out(dir_ / ("rank-" + std::to_string(c.rank) + ".otlp.jsonl"),
                        std::ios::binary | std::ios::app);
      out << up.clock_sample_line(first / 2 + last / 2, c.offset_ns, c.uncertainty_ns,
                                  c.messages)
          << '\n';
      if (!out) throw ReadError(dir_.string() + ": cannot write rank " + std::to_string(c.rank));
      widest = std::max(widest, c.uncertainty_ns);
      messages += c.messages;
      contradicted += c.contradicted ? 1 : 0;
    }
    if (m.clocks.size() > 1)
      stats_.warnings.push_back(
          "inferred: clocks of rank 0's pipeline (" + std::to_string(m.clocks.size()) +
          " ranks) from " + std::to_string(messages) +
          " matched transfers (a receive cannot end before its send began), within " +
          std::to_string((widest + 500) / 1000) + " us" +
          (contradicted > 0 ? "; " + std::to_string(contradicted) +
                                  " stage pairs' bounds crossed (their clocks moved during the "
                                  "run): the middle taken"
                            : std::string()));
    for (const auto& note : m.notes) stats_.warnings.push_back(note);
    if (upstream_.size() > m.clocks.size() && m.notes.empty())
      stats_.warnings.push_back(
          "clocks: " + std::to_string(upstream_.size() - m.clocks.size()) +
          " ranks outside rank 0's pipeline (no traced message joins them to it) are read on "
          "their own clocks");
  }

  // The transfers upstream does not trace (its combined steady-state calls):
  // their waits are gaps between the spans, counted as idle.
  void untraced_warning() {
    static constexpr const char* kKinds[4] = {"forward receives", "forward sends",
                                              "backward receives", "backward sends"};
    std::string which;
    for (std::size_t k = 0; k < 4; ++k)
      if (untraced_[k] > 0)
        which += (which.empty() ? "" : ", ") + std::to_string(untraced_[k]) + " of " +
                 std::to_string(scheduled_[k]) + " " + kKinds[k];
    if (which.empty()) return;
    stats_.warnings.push_back(
        "untraced transfers: " + which +
        " (the combined calls send_forward_recv_backward and send_backward_recv_forward, which "
        "upstream does not trace): their time is a gap between the microbatches, counted as "
        "idle, not as a wait");
  }

  // A file's plain content: JSON (lines or one document) or length-prefixed
  // records. Errors name `shown` (the file as the user named it).
  void contents(const std::filesystem::path& path, const std::filesystem::path& shown) {
    std::ifstream in(path, std::ios::binary);
    char first = 0;
    while (in.get(first) && (first == ' ' || first == '\n' || first == '\r' || first == '\t')) {
    }
    if (!in) return;  // empty
    in.seekg(0);
    const auto byte = static_cast<unsigned char>(first);
    if (shown.extension() == ".log")
      json_file(in, path, shown, true, true);  // a process's output: its spans, if any
    else if (first == '{' || first == '[')
      json_file(in, path, shown, false, false);
    else if (byte >= 0x20 && byte < 0x7f)
      json_file(in, path, shown, true, false);  // text: a console exporter's spans among log lines
    else
      records(in, path, shown);
  }

  // JSON lines or one document; `mixed`: text whose first line is not JSON,
  // where lines that are not JSON are another program's output (passed
  // over), as are they once a console exporter's span was seen.
  void json_file(std::ifstream& in, const std::filesystem::path& path,
                 const std::filesystem::path& shown, bool mixed, bool may_hold_none) {
    LineReader lines(in);
    std::string line;
    std::size_t number = 0;
    bool console = false;
    std::size_t spans_before = stats_.spans;
    for (;;) {
      const LineReader::Status status = lines.next(line);
      if (status == LineReader::Status::kEnd) {
        if (mixed && !may_hold_none && stats_.spans == spans_before)
          throw ReadError(shown.string() +
                          ": neither OTLP data nor the OpenTelemetry console exporter's spans "
                          "(one JSON object a line)");
        return;
      }
      ++number;
      if (status == LineReader::Status::kTooLong)
        throw ReadError(shown.string() + ":" + std::to_string(number) +
                        ": the line is longer than " + std::to_string(kMaxLineBytes) +
                        " bytes (the reader's limit)");
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const auto brace = line.find_first_not_of(" \t\r");
      std::optional<json> doc = line[brace] == '{' || line[brace] == '[' ? parse(line) : std::nullopt;
      if (!doc && (mixed || console)) {
        ++log_lines_;
        continue;
      }
      if (doc && is_console_span(*doc)) {
        const std::string where = shown.string() + ":" + std::to_string(number);
        json request;
        try {
          request = request_of_console_span(*doc);
        } catch (const std::exception& e) {
          throw ReadError(where + ": a console exporter span that does not read: " + e.what());
        }
        console = true;
        take(request, where);
        continue;
      }
      if (!doc && number == 1) {
        document(path, shown);  // a document over several lines (pretty-printed)
        return;
      }
      if (!doc) {
        if (status == LineReader::Status::kUnterminated) {
          stats_.warnings.push_back(shown.string() + ":" + std::to_string(number) +
                                    ": skipped an incomplete last line");
          return;
        }
        throw ReadError(shown.string() + ":" + std::to_string(number) +
                        ": not an OTLP/JSON request or document");
      }
      take(*doc, shown.string() + ":" + std::to_string(number));
    }
  }

  void document(const std::filesystem::path& path, const std::filesystem::path& shown) {
    const std::uintmax_t size = std::filesystem::file_size(path);
    if (size > kMaxDocumentBytes)
      throw ReadError(shown.string() + ": a JSON document of " + std::to_string(size) +
                      " bytes (over the reader's limit of 1 GiB)");
    std::ifstream in(path, std::ios::binary);
    std::string text(static_cast<std::size_t>(size), '\0');
    in.read(text.data(), static_cast<std::streamsize>(size));
    std::optional<json> doc = parse(text);
    if (!doc) throw ReadError(shown.string() + ": not JSON lines nor a JSON document");
    take(*doc, shown.string());
  }

  static std::optional<json> parse(const std::string& text) {
    if (!json_depth_within(text)) return std::nullopt;
    json doc = json::parse(text, nullptr, false);
    if (doc.is_discarded()) return std::nullopt;
    return doc;
  }

  void records(std::ifstream& in, const std::filesystem::path& path,
               const std::filesystem::path& shown) {
    std::uint64_t offset = 0;
    const std::uintmax_t size = std::filesystem::file_size(path);
    std::string record;
    for (;;) {
      unsigned char prefix[4];
      in.read(reinterpret_cast<char*>(prefix), 4);
      const auto got = in.gcount();
      if (got == 0) return;
      const std::string where = shown.string() + ": offset " + std::to_string(offset);
      if (got < 4)
        throw ReadError(where + ": a length prefix cut short (" + std::to_string(got) +
                        " of 4 bytes)");
      const std::uint32_t length = (std::uint32_t{prefix[0]} << 24) |
                                   (std::uint32_t{prefix[1]} << 16) |
                                   (std::uint32_t{prefix[2]} << 8) | prefix[3];
      const std::uintmax_t left = size - offset - 4;
      if (length > left)
        throw ReadError(where + ": a length prefix of " + std::to_string(length) +
                        " bytes runs past the end of the file (" + std::to_string(left) +
                        " bytes left); not a length-prefixed OTLP file, or a truncated one");
      if (length > kMaxRecordBytes)
        throw ReadError(where + ": a record of " + std::to_string(length) +
                        " bytes (over the reader's limit of " + std::to_string(kMaxRecordBytes) +
                        ")");
      record.resize(length);
      in.read(record.data(), length);
      ++stats_.records;
      try {
        std::string plain = starts_with_zstd(record) ? unzstd(record) : std::move(record);
        const auto first = plain.find_first_not_of(" \t\r\n");
        if (first != std::string::npos && plain[first] == '{') {
          std::optional<json> doc = parse(plain);
          if (!doc) throw std::runtime_error("a JSON record that does not parse");
          take(*doc, where);
        } else {
          json request = request_of_proto(plain);
          take(request, where);
        }
      } catch (const ReadError&) {
        throw;
      } catch (const std::exception& e) {
        throw ReadError(where + ": " + e.what());
      }
      offset += 4 + length;
    }
  }

  // A request, a Jaeger api_v3 response or a Tempo trace: its resources'
  // batches to their ranks.
  void take(json& doc, const std::string& where) {
    if (doc.is_array()) {
      for (auto& item : doc) take(item, where);
      return;
    }
    if (!doc.is_object()) throw ReadError(where + ": not a JSON object");
    for (const char* wrapper : {"result", "trace"})
      if (auto it = doc.find(wrapper); it != doc.end() && it->is_object()) {
        take(*it, where);
        return;
      }
    json* batches = nullptr;
    for (const char* key : {"resourceSpans", "batches"})
      if (auto it = doc.find(key); it != doc.end() && it->is_array()) batches = &*it;
    if (batches == nullptr) {
      if (doc.contains("data"))
        throw ReadError(where +
                        ": a Jaeger v1 document ({\"data\": ...}), not OTLP: query "
                        "Jaeger's api_v3 (/api/v3/traces/<id>) for OTLP");
      return;  // an empty request
    }
    for (auto& rs : *batches) batch(rs, where);
  }

  void batch(json& rs, const std::string& where) {
    if (!rs.is_object()) throw ReadError(where + ": a resourceSpans entry is not an object");
    if (auto old = rs.find("instrumentationLibrarySpans");
        old != rs.end() && !rs.contains("scopeSpans")) {
      rs["scopeSpans"] = std::move(*old);
      rs.erase("instrumentationLibrarySpans");
    }
    // Ids in base64 (proto3 JSON's bytes) as the hex the reader takes.
    if (auto scopes = rs.find("scopeSpans"); scopes != rs.end() && scopes->is_array())
      for (auto& ss : *scopes) {
        if (!ss.is_object()) continue;
        if (auto list = ss.find("spans"); list != ss.end() && list->is_array())
          for (auto& s : *list) {
            if (!s.is_object()) continue;
            normalize_id(s, "traceId", 16);
            normalize_id(s, "spanId", 8);
            normalize_id(s, "parentSpanId", 8);
            if (auto links = s.find("links"); links != s.end() && links->is_array())
              for (auto& l : *links)
                if (l.is_object()) {
                  normalize_id(l, "traceId", 16);
                  normalize_id(l, "spanId", 8);
                }
          }
      }
    const std::string line = json{{"resourceSpans", json::array({std::move(rs)})}}.dump(
        -1, ' ', false, json::error_handler_t::replace);
    // Read now as the readers will read it: a malformed span is named here,
    // in the file it came from, not later in the copy; and the reader's
    // resource and times say the batch's rank and its earliest span end.
    RankFile read;
    try {
      parse_request(read, line);
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      throw ReadError(where + ": not an OTLP/JSON request: " + e.what());
    }
    stats_.spans += read.spans.size();
    const int rank = read.rank;
    // Runs told apart by their id (nemo-lens's, or NeMo's): a folder holding
    // several is read for the one named (LENS_RUN), else refused.
    std::string run;
    for (const char* key : kRunIdAttributes)
      if (auto it = read.resource.find(key); it != read.resource.end() && run.empty())
        run = it->second;
    if (!run.empty() && !read.spans.empty()) {
      runs_[run] += read.spans.size();
    }
    if (!run_.empty() && run != run_) return;  // of another run, or of none
    if (rank < 0) {
      stats_.foreign_spans += read.spans.size();
      return;
    }
    for (const SpanRow& row : read.spans)
      if (is_upstream_step_span(row)) {
        upstream_ranks_.insert(rank);
        upstream_world_ = std::max(upstream_world_, read.world_size);
        break;
      }
    ++stats_.batches;
    std::int64_t first_end = 0;
    for (std::size_t i = 0; i < read.spans.size(); ++i)
      first_end = i == 0 ? read.spans[i].end_ns : std::min(first_end, read.spans[i].end_ns);
    RankSpill& spill = spills_[rank];
    if (!spill.out.is_open()) spill.out.open(dir_ / spill_name(rank), std::ios::binary);
    spill.out.write(line.data(), static_cast<std::streamsize>(line.size()));
    spill.batches.push_back({spill.bytes, static_cast<std::uint32_t>(line.size()), first_end});
    spill.bytes += line.size();
    if (!spill.out) throw ReadError((dir_ / spill_name(rank)).string() + ": cannot write");
  }

  std::filesystem::path dir_;
  std::map<int, RankSpill> spills_;
  ImportStats stats_;
  int scratch_ = 0;
  // The rank order upstream ranks are placed by (LENS_RANK_ORDER, which
  // `lens --rank-order` sets, else Megatron's default).
  const std::string order_ = [] {
    const char* v = std::getenv("LENS_RANK_ORDER");
    return std::string(v && *v ? v : kMegatronRankOrder);
  }();
  // The run to read when the traces hold several (LENS_RUN, which `lens
  // --run` sets), and the spans of each run id seen.
  const std::string run_ = [] {
    const char* v = std::getenv("LENS_RUN");
    return std::string(v ? v : "");
  }();
  std::map<std::string, std::size_t> runs_;
  std::set<int> upstream_ranks_;  // ranks whose spans are Megatron-LM upstream's
  int upstream_world_ = -1;
  std::size_t log_lines_ = 0;
  UpstreamSteps::P2pCounts scheduled_{}, untraced_{};  // over the upstream ranks
  std::map<int, UpstreamSteps> upstream_;               // by rank, once written
};

bool passed_over(const std::filesystem::path& p) {
  // (.log files are read for console-exporter spans, and passed over
  // without them: Importer::contents.)
  static const char* kNotTraces[] = {".html", ".txt", ".md", ".png", ".csv"};
  const std::string ext = p.extension().string();
  return std::any_of(std::begin(kNotTraces), std::end(kNotTraces),
                     [&](const char* e) { return ext == e; });
}

// The imports this process holds (removed when their OpenedRun goes, or at
// exit), and every import folder it made, by the input it was made from, so
// that a message naming one after it went still names the input.
struct Imports {
  std::mutex mutex;
  std::set<std::filesystem::path> live;
  std::map<std::filesystem::path, std::filesystem::path> input_of;  // folder -> input
  ~Imports() {
    for (const auto& dir : live) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  }
};

// The import folders of this process as plain text, for a signal handler to
// remove: a fixed table, filled before a folder is made and emptied after
// it is removed.
struct SignalTable {
  static constexpr int kSlots = 32;
  static constexpr std::size_t kPath = 4096;
  char paths[kSlots][kPath] = {};
  std::atomic<bool> used[kSlots] = {};
};
SignalTable& signal_table() {
  static SignalTable table;
  return table;
}
void remember_for_signals(const std::filesystem::path& dir) {
  const std::string s = dir.string();
  if (s.size() >= SignalTable::kPath) return;
  SignalTable& t = signal_table();
  for (int i = 0; i < SignalTable::kSlots; ++i)
    if (!t.used[i].load()) {
      std::memcpy(t.paths[i], s.c_str(), s.size() + 1);
      t.used[i].store(true);
      return;
    }
}
void forget_for_signals(const std::filesystem::path& dir) {
  SignalTable& t = signal_table();
  for (int i = 0; i < SignalTable::kSlots; ++i)
    if (t.used[i].load() && dir.string() == t.paths[i]) t.used[i].store(false);
}

// Removes the import folders (flat: only files in them), then dies of the
// signal as it would have without the handler. Only async-signal-safe
// calls: the folder is listed by getdents64 into a buffer on the stack
// (opendir allocates, and the signal may have come inside malloc).
void remove_imports_and_die(int signal) {
  struct Entry {  // the kernel's linux_dirent64
    std::uint64_t ino;
    std::int64_t off;
    unsigned short length;
    unsigned char type;
    char name[1];
  };
  SignalTable& t = signal_table();
  for (int i = 0; i < SignalTable::kSlots; ++i) {
    if (!t.used[i].load()) continue;
    const int dir = ::open(t.paths[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      // Removing while listing may hide entries from the listing: listed
      // again from the start until a pass removes nothing.
      for (bool removed = true; removed;) {
        removed = false;
        ::lseek(dir, 0, SEEK_SET);
        alignas(8) char entries[4096];
        for (long n; (n = ::syscall(SYS_getdents64, dir, entries, sizeof entries)) > 0;) {
          for (long at = 0; at < n;) {
            const auto* e = reinterpret_cast<const Entry*>(entries + at);
            at += e->length;
            const char* name = e->name;
            if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
            if (::unlinkat(dir, name, 0) == 0) removed = true;
          }
        }
      }
      ::close(dir);
    }
    ::rmdir(t.paths[i]);
  }
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

Imports& imports() {
  static Imports all;
  return all;
}

}  // namespace

void sweep_stale_imports(const std::filesystem::path& temp) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(temp, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("lens-import-")) continue;
    const std::string rest = name.substr(12);
    const auto dash = rest.find('-');
    if (dash == std::string::npos || dash == 0) continue;
    long long pid = 0;
    try {
      std::size_t used = 0;
      pid = std::stoll(rest.substr(0, dash), &used);
      if (used != dash) continue;
    } catch (const std::exception&) {
      continue;
    }
    if (pid <= 0 || pid == getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours
    std::error_code ignored;
    std::filesystem::remove_all(e.path(), ignored);
  }
}

bool is_lens_layout(const std::filesystem::path& input) {
  std::error_code ec;
  if (!std::filesystem::is_directory(input, ec)) return false;
  for (const auto& e : std::filesystem::directory_iterator(input, ec))
    if (e.is_regular_file() && e.path().string().ends_with(".otlp.jsonl")) return true;
  return false;
}

ImportStats import_run(const std::filesystem::path& input, const std::filesystem::path& out_dir) {
  std::error_code ec;
  std::vector<std::filesystem::path> paths;
  if (std::filesystem::is_regular_file(input, ec)) {
    paths.push_back(input);
  } else if (std::filesystem::is_directory(input, ec)) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(input))
      if (e.is_regular_file() && !passed_over(e.path())) paths.push_back(e.path());
  } else {
    throw ReadError(input.string() + ": no such file or directory");
  }
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) throw ReadError(input.string() + ": no trace files");
  // A folder of runs (lens-traces/) is not one run: name them instead of
  // reading them as one.
  std::vector<std::filesystem::path> runs;
  for (const auto& p : paths)
    if (p.string().ends_with(".otlp.jsonl") && p.parent_path() != input &&
        std::find(runs.begin(), runs.end(), p.parent_path()) == runs.end())
      runs.push_back(p.parent_path());
  if (runs.size() > 1)
    throw ReadError(input.string() + " holds " + std::to_string(runs.size()) +
                    " runs in lens's layout (" + runs[0].filename().string() + ", " +
                    runs[1].filename().string() + (runs.size() > 2 ? ", ..." : "") +
                    "): name one of them");
  std::filesystem::create_directories(out_dir);
  Importer importer(out_dir);
  for (const auto& p : paths) importer.file(p);
  ImportStats stats;
  try {
    stats = importer.finish();
  } catch (const ReadError& e) {
    throw ReadError(input.string() + ": " + e.what());  // named by the input as given
  }
  if (stats.batches == 0)
    throw ReadError(input.string() + ": no spans of a lens rank (no resource with dl.rank) in " +
                    std::to_string(stats.files) + " file(s)");
  return stats;
}

ImportedRun import_for_reading(const std::filesystem::path& input) {
  static std::once_flag swept;
  std::call_once(swept, [] { sweep_stale_imports(std::filesystem::temp_directory_path()); });
  static std::atomic<int> counter{0};
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("lens-import-" + std::to_string(getpid()) + "-" + std::to_string(++counter));
  std::filesystem::remove_all(dir);
  Imports& all = imports();
  {
    std::lock_guard<std::mutex> lock(all.mutex);
    all.live.insert(dir);
    all.input_of[dir] = input;
  }
  remember_for_signals(dir);
  try {
    return {dir, import_run(input, dir)};
  } catch (...) {
    release_import(dir);
    throw;
  }
}

void release_import(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  forget_for_signals(dir);
  Imports& all = imports();
  std::lock_guard<std::mutex> lock(all.mutex);
  all.live.erase(dir);
}

}  // namespace lens::analysis

namespace lens::analysis {

void remove_imports_on_signals() {
  for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    struct sigaction action {};
    action.sa_handler = &remove_imports_and_die;
    sigemptyset(&action.sa_mask);
    ::sigaction(signal, &action, nullptr);
  }
}

std::string name_imports(std::string text) {
  Imports& all = imports();
  std::lock_guard<std::mutex> lock(all.mutex);
  for (const auto& [folder, input] : all.input_of) {
    const std::string dir = folder.string() + "/";
    const std::string shown = input.string() + ": imported ";
    for (std::size_t at = text.find(dir); at != std::string::npos;
         at = text.find(dir, at + shown.size()))
      text.replace(at, dir.size(), shown);
  }
  return text;
}

}  // namespace lens::analysis
