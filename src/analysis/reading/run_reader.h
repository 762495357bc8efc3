// Reading a run's OTLP-JSON-lines files (one per rank, as lens writes them)
// into plain span rows for the `lens` command.
//
// Every line must be an OTLP/JSON ExportTraceServiceRequest. A line that does
// not parse is an error naming the file and line, except an unterminated
// last line (a process killed mid-write), which is skipped with a warning.
//
// The files are untrusted input. The reader refuses a line longer than
// kMaxLineBytes (64 MiB, line_reader.h) or nested deeper than kMaxJsonDepth
// (64, json_depth.h), and validates every id where it appears (trace, span,
// parent and link ids: hex of the right length, either case, read as
// lowercase; a parent of zeros means none). It accepts what proto3 JSON may
// leave out (empty arrays, an empty name, zero times) and enum names as
// well as numbers, and parses numbers strictly ("12abc" is an error).
//
// Thread safety: plain functions and values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "hex_id.h"
#include "line_reader.h"

#include "opened_run.h"
#include "shared_map.h"
#include "span_attributes.h"

namespace lens::analysis {

struct SpanRow {
  int rank = -1;  // dl.rank of the file's resource
  // Which process recorded it: process_key of the resource. A rank's spans
  // from two processes (a restart) are kept apart by clock alignment.
  std::uint64_t process = 0;
  HexId trace_id, span_id, parent_span_id;  // parent empty: none
  std::string name;
  std::int64_t start_ns = 0, end_ns = 0;
  int kind = 0;         // OTLP SpanKind: 0 unspecified, 1 internal, 2 server, 3 client, ...
  int status_code = 0;  // OTLP StatusCode: 0 unset, 1 ok, 2 error
  std::string status_message;
  // Values as text, each with its type as read (span_attributes.h).
  Attributes attributes;
  std::vector<std::pair<HexId, HexId>> links;  // (trace id, span id)

  std::int64_t int_attr(std::string_view key, std::int64_t fallback = -1) const;
  bool has(std::string_view key) const { return attributes.has(key); }
};

// A process's identity from its resource attributes: a hash of host.name,
// process.pid, service.instance.id and lens.telemetry.start_unix_ns (the
// last tells apart a restart that got the same host name and pid, as in a
// container).
std::uint64_t process_key(const std::map<std::string, std::string>& resource);

struct RankFile {
  std::filesystem::path path;
  int rank = -1;
  int world_size = -1;
  std::string run_id;  // nemo.lens.run_uuid, else nemo.run.id
  std::string service_name;
  std::string trace_scope;    // lens.trace_scope: "world" (or absent) or "pipeline"
  std::string export_filter;  // lens.export_filter, when ranks were filtered out
  int replica = -1;           // dl.data_parallel.rank
  int tensor_rank = -1;       // dl.tensor_parallel.rank
  std::uint64_t process = 0;  // process_key of the latest line's resource
  // Every resource attribute, as text, and their types, as Attributes::type;
  // shared by the copies of the file's fields (one in each step window).
  SharedMap<std::string> resource;
  SharedMap<char> resource_types;
  std::vector<SpanRow> spans;
  std::size_t lines = 0;
  std::vector<std::string> warnings;
  // The resource the reader applied last (its attributes' keys, texts and
  // types, flattened) and the dl.rank it gave: a line whose resource is the
  // same (most often every line's is) is not applied again. The reader's
  // own; without_spans leaves it out.
  struct ResourceSeen {
    bool applied = false;
    std::string flat;
    int rank = -1;
  };
  ResourceSeen resource_seen;

  // Everything but the spans (and resource_seen).
  RankFile without_spans() const;
};

struct Run {
  std::filesystem::path dir;
  std::vector<RankFile> files;  // sorted by rank

  std::size_t span_count() const;
  // The world size the files' resources declare (the largest seen), or -1.
  int declared_world_size() const;
};

// A malformed input: names the file and line.
class ReadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A whole decimal integer, nothing before or after it ("12abc" is not 12).
std::optional<std::int64_t> strict_int(std::string_view text);

// A resource's attributes (as text) onto `file`: its rank, world size, run
// id, ... and process; returns dl.rank (-1 when absent). ReadError-worthy
// std::runtime_error for a rank attribute that is not a rank number.
int take_resource(RankFile& file, const std::map<std::string, std::string>& resource);

// Parses one OTLP/JSON ExportTraceServiceRequest (a line's text): its spans
// appended to file.spans, its resource's fields set on `file`.
// std::runtime_error saying what is malformed (the caller names where).
void parse_request(RankFile& file, const std::string& line);
// The same with only the spans named `only` kept (empty: all of them).
void parse_request(RankFile& file, const std::string& line, std::string_view only);

// Reads one rank's file a line at a time: each line's spans are appended to
// file().spans (the caller may move them out between lines), and the
// resource fields are filled from the lines read so far.
class RankFileReader {
 public:
  // ReadError if unreadable. `max_line_bytes` is for tests; readers keep the
  // default.
  explicit RankFileReader(const std::filesystem::path& path,
                          std::size_t max_line_bytes = kMaxLineBytes);
  // Reads the next non-empty line; false at the end of the file (or at an
  // incomplete last line, which is skipped with a warning). ReadError, naming
  // the file and line, for a malformed line.
  bool next_line();
  bool done() const { return done_; }
  // Before the first line is read: starts at byte `offset`, the start of
  // line `line` (1-based), so that errors name the line where it is.
  void start_at(std::uint64_t offset, std::size_t line);
  // From now on reads only the spans named `name` (a pass that looks for a
  // few spans by name): a line without the name is skipped unparsed, and of
  // the others only those spans become rows (the others are not checked:
  // the pass that reads every span does).
  void only_spans_named(std::string name) { needle_ = std::move(name); }
  // Shows every line read to `look` first (empty ones and the ones the
  // name skips too; not one over the limit): its text, the byte it starts
  // at and its number. A pass that scans every line for something else
  // (the step index) then reads the file once with this one.
  using LineLook = std::function<void(std::string_view line, std::uint64_t offset,
                                      std::size_t number)>;
  void look_at_every_line(LineLook look) { look_ = std::move(look); }
  std::uintmax_t bytes_read() const { return bytes_; }
  // The number of the line last read (1-based; 0 before the first).
  std::size_t line_number() const { return number_; }
  RankFile& file() { return file_; }
  RankFile take() { return std::move(file_); }

 private:
  std::ifstream in_;
  LineReader lines_;
  std::size_t max_line_bytes_;
  RankFile file_;
  std::size_t number_ = 0;
  std::uintmax_t bytes_ = 0;
  bool done_ = false;
  std::string needle_;
  LineLook look_;
};

// Reads every rank file of the run into memory. `progress` is called after
// each file with (files done, files). For long runs prefer stream_steps
// (step_stream.h).
Run read_run(const OpenedRun& run,
             const std::function<void(std::size_t, std::size_t)>& progress = {});

}  // namespace lens::analysis
