// Runs in other layouts than lens's own: whatever holds OTLP trace data
// (docs/collector-files.md). lens writes one OTLP JSON lines file per rank,
// each rank's batches in the order its spans ended; a collector, Jaeger or
// Tempo keeps every rank's batches together, in arrival order, in one or
// many files, in several formats. The readers take lens's layout; any other
// input is imported into it first, into a temporary directory that the
// OpenedRun reading it holds (opened_run.h).
//
// What is imported: every regular file under the input (a file, or a
// directory walked recursively; names ending .html, .txt, .md, .png or .csv
// are passed over, and .log files read only for the console exporter's
// spans among their lines), each format detected from its content:
//  - OTLP JSON lines (lens's files, the collector file exporter's `json`);
//  - JSON documents, one per file or per line: an ExportTraceServiceRequest
//    ({"resourceSpans": ...}), a Jaeger query api_v3 response ({"result":
//    {...}}), a Tempo /api/traces/<id> response ({"batches": [...]} or
//    {"trace": {...}}); "instrumentationLibrarySpans" is read as
//    "scopeSpans"; ids in hex or base64 (proto3 JSON's bytes);
//  - the collector file exporter's length-prefixed records (4 bytes, big
//    endian, then the message): protobuf ExportTraceServiceRequests or
//    JSON, each record plain or a zstd frame (`compression: zstd`);
//  - a whole file compressed as one zstd stream (the exporter's native
//    compression), holding either of the above;
//  - the OpenTelemetry Python SDK's console exporter: a span a line
//    (console_spans.h), among other output, which is passed over.
// Megatron-LM's own traces (a step span without dl.step) are correlated
// after the fact as they are written (upstream_steps.h), and the import's
// warnings say what was inferred and what is missing.
// Rotated sets are many files of these. Each resource's batch goes to its
// rank (dl.rank; batches of resources without one, other services sharing
// the collector, are counted and left out); a rank's batches are then
// written in the order of their earliest span end, so that a shuffled file
// reads as its ranks wrote it.
//
// Memory: one record or line at a time (at most kMaxLineBytes), plus an
// index entry (24 bytes) per batch; the batches themselves are spilled to
// disk, then copied out in order. Bad input is a ReadError naming the file
// and the byte offset (a record) or line (a JSON line).
//
// Thread safety: import_for_reading may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>
#include "lens/semconv.h"

namespace lens::analysis {

// Traces holding several runs (semconv::kRunIdAttributes) are read for the
// one LENS_RUN names.
using semconv::kRunIdAttributes;

struct ImportStats {
  std::size_t files = 0, records = 0, batches = 0, spans = 0;
  std::size_t foreign_spans = 0;  // of resources without dl.rank
  std::size_t upstream_ranks = 0;  // ranks of Megatron-LM upstream traces (upstream_steps.h)
  std::vector<std::string> warnings;
};

// Whether `input` is lens's own layout: a directory with *.otlp.jsonl files
// directly in it (read as it is, as before).
bool is_lens_layout(const std::filesystem::path& input);

// Imports `input` into `out_dir` (created; rank-<r>.otlp.jsonl files).
ImportStats import_run(const std::filesystem::path& input, const std::filesystem::path& out_dir);

// Removes the imports (lens-import-<pid>-<n>) under `temp` of processes
// that no longer run: one stopped by a signal leaves its import behind, the
// next process that imports removes it (import_for_reading does, once).
void sweep_stale_imports(const std::filesystem::path& temp);

// One import of `input` for reading (OpenedRun, opened_run.h, holds it): a
// folder of rank files under the temporary directory, and what importing
// had to say. release_import removes it; what is left at exit (or, with
// remove_imports_on_signals, on a signal) is removed then.
struct ImportedRun {
  std::filesystem::path dir;
  ImportStats stats;
};
ImportedRun import_for_reading(const std::filesystem::path& input);
void release_import(const std::filesystem::path& dir);

// A message with every import folder's path put as the user named its input
// ("<input>: imported rank-3.otlp.jsonl:12" for a line of that rank's
// spans as imported), so no message names a temporary copy.
std::string name_imports(std::string text);

// For a command-line program: SIGINT, SIGTERM, SIGHUP and SIGQUIT remove this
// process's import folders before the process dies of the signal (a library
// leaves its host's signals alone: stale imports are swept by the next
// process that imports).
void remove_imports_on_signals();

}  // namespace lens::analysis
