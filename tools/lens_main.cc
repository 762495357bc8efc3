// lens: look at a pipeline-parallel run's traces.
//
//   lens check RUN_DIR                 correlation invariants; exit 0 ok, 1 violated, 2 bad input
//   lens summary RUN_DIR [--json]      time per step and stage, bubble, slowest stage
//   lens analyze RUN_DIR [--json | --per-step]  critical path, waits, idle by cause, stragglers
//   lens diff RUN_A RUN_B              per stage, what changed between two runs
//   lens timeline RUN_DIR -o wave.html [--steps A-B]
//   lens report RUN_DIR [-o report.html]    the run on one page (charts, waves, analysis)
//   lens export RUN_DIR --perfetto out.json | --jaeger out.json
//   lens upload DIR|FILE... [--endpoint URL]   send files to an OTLP/HTTP endpoint
//
// RUN_DIR is a directory of rank-<r>.otlp.jsonl files (lens-traces/<run-id>),
// or any file or directory of OTLP traces, imported first (run_import.h).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <tuple>
#include <utility>

#include "analyze.h"
#include "check.h"
#include "lens/config.h"
#include "lens/error.h"
#include "lens/version.h"
#include "mpi_analyze.h"
#include "rank_order.h"
#include "report.h"
#include "run_import.h"
#include "run_reader.h"
#include "step_stream.h"
#include "summary.h"
#include "timeline.h"
#include "upload.h"
#include "viewer_export.h"

namespace {

using namespace lens::analysis;
using namespace lens::tools;

constexpr int kOk = 0, kViolations = 1, kBadInput = 2;

constexpr const char* kRunHelp =
    "the run: a directory of rank-<r>.otlp.jsonl files, or any file or directory of OTLP "
    "traces (a collector's files, Jaeger api_v3 or Tempo documents: docs/collector-files.md)";

// Reading progress on a terminal, by bytes of all the run's files.
StreamOptions reading_options() {
  StreamOptions o;
  if (!isatty(STDERR_FILENO)) return o;
  o.progress = [last = -1](std::uintmax_t done, std::uintmax_t total) mutable {
    if (total < (8u << 20)) return;  // small runs read in a blink
    const int percent = static_cast<int>(100 * done / total);
    if (percent == last) return;
    last = percent;
    std::fprintf(stderr, "\rreading %ju/%ju MiB (%d%%)", done >> 20, total >> 20, percent);
    if (done >= total) std::fprintf(stderr, "\r\033[K");
  };
  return o;
}

void print_warnings(const std::vector<std::string>& warnings) {
  for (const auto& w : warnings)
    std::fprintf(stderr, "lens: warning: %s\n", name_imports(w).c_str());
}

// "A-B" or "A": whole non-negative numbers, A <= B.
std::optional<std::pair<std::int64_t, std::int64_t>> parse_step_range(std::string_view text) {
  const auto number = [](std::string_view t) -> std::optional<std::int64_t> {
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || ptr != t.data() + t.size() || v < 0) return std::nullopt;
    return v;
  };
  const auto dash = text.find('-');
  const auto first = number(text.substr(0, dash));
  const auto last = dash == std::string_view::npos ? first : number(text.substr(dash + 1));
  if (!first || !last || *first > *last) return std::nullopt;
  return std::pair{*first, *last};
}

bool write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  if (!out) {
    std::fprintf(stderr, "lens: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

int run_lens(int argc, char** argv) {
  CLI::App app{"lens: check, summarise and draw a pipeline-parallel run's traces"};
  app.set_version_flag("--version", std::string("lens ") + lens::kVersion);
  app.require_subcommand(1);
  std::string dir;

  auto* check = app.add_subcommand("check", "verify the run's cross-rank correlation");
  check->add_option("RUN_DIR", dir, kRunHelp)->required();
  bool allow_late = false;
  check->add_flag("--allow-late", allow_late,
                  "pass even when spans arrived after their step was checked (they are counted, "
                  "not checked); a span delivered twice still fails");

  bool as_json = false;
  auto* summary = app.add_subcommand("summary", "time per step and stage, bubble, slowest stage");
  summary->add_option("RUN_DIR", dir, kRunHelp)->required();
  summary->add_flag("--json", as_json, "machine-readable output");

  auto* analyze = app.add_subcommand(
      "analyze", "critical path, wait states, idle by cause and stragglers, per stage");
  analyze->add_option("RUN_DIR", dir, kRunHelp)->required();
  analyze->add_flag("--json", as_json, "machine-readable output");
  bool use_mpi = false;
  for (auto* command : {check, summary, analyze})
    command->add_flag("--mpi", use_mpi,
                      "split the reading over the processes of an MPI job (the default when "
                      "started by mpirun with more than one process): mpirun -n K lens " +
                          command->get_name() + " RUN");
  bool per_step = false;
  analyze->add_flag("--per-step", per_step,
                    "a row per step and stage: the columns that add up to its step span")
      ->excludes("--json");
  std::string other_dir;
  auto* diff = app.add_subcommand("diff", "per stage, what changed from run A to run B");
  diff->add_option("RUN_A", dir, "the first run's directory")->required();
  diff->add_option("RUN_B", other_dir, "the second run's directory")->required();

  std::string output, steps = "0-2";
  auto* timeline =
      app.add_subcommand("timeline", "draw the pipeline wave as a self-contained HTML file");
  timeline->add_option("RUN_DIR", dir, kRunHelp)->required();
  timeline->add_option("-o,--output", output, "HTML file to write")->required();
  timeline->add_option("--steps", steps, "steps to draw, A-B or A")->capture_default_str();

  std::string report_output;
  auto* report = app.add_subcommand(
      "report", "the run on one self-contained HTML page: charts over the run, waves, analysis");
  report->add_option("RUN_DIR", dir, kRunHelp)->required();
  report->add_option("-o,--output", report_output,
                     "HTML file to write (default: RUN_DIR/report.html)");

  std::string perfetto, jaeger;
  auto* exp = app.add_subcommand("export", "write the run in a viewer's format");
  exp->add_option("RUN_DIR", dir, kRunHelp)->required();
  exp->add_option("--perfetto", perfetto, "Chrome trace-event JSON for Perfetto UI");
  exp->add_option("--jaeger", jaeger, "JSON for Jaeger UI's file upload");
  JaegerOptions jaeger_options;
  exp->add_flag("--plain-service-name", jaeger_options.plain_service_name,
                "Jaeger: keep each rank's service name as it is (default: \"<service> r<rank> "
                "s<stage>\", so ranks are told apart)");

  bool raw_clock = false;
  for (auto* command : {summary, analyze, diff, timeline, report, exp})
    command->add_flag("--raw-clock", raw_clock,
                      "each rank's timestamps as recorded, not aligned to rank 0's clock by the "
                      "run's lens.clock_sync samples");

  // Megatron-LM's own traces (docs/megatron-traces.md): the order in which
  // ranks vary over the parallel dimensions, for runs that give sizes only.
  std::string rank_order;
  for (auto* command : {check, summary, analyze, diff, timeline, report, exp})
    command
        ->add_option("--rank-order", rank_order,
                     "for Megatron-LM's own traces: the parallel dimensions fastest first "
                     "(default tp-cp-ep-dp-pp, Megatron's; e.g. tp-cp-ep-pp-dp); "
                     "LENS_RANK_ORDER too")
        ->check([](const std::string& order) {
          try {
            place_rank(0, -1, {1, 1, 1, 1, 1}, order);
            return std::string();
          } catch (const std::invalid_argument& e) {
            return std::string(e.what());
          }
        })
        ->each([](const std::string& order) { ::setenv("LENS_RANK_ORDER", order.c_str(), 1); });

  // Reading on a thread of its own while the views work (step_stream.h).
  int read_threads = 0;
  for (auto* command : {check, summary, analyze, diff, timeline, report, exp})
    command
        ->add_option("--threads", read_threads,
                     "threads: 1 reads and works on one; 2 or more read the files on one while "
                     "the view works on another (the same output); default: the machine's cores "
                     "(under MPI, shared between the node's processes)")
        ->check(CLI::Range(1, 1024))
        ->each([](const std::string& n) { set_default_read_threads(std::stoi(n)); });

  // Traces of several runs in one place: the one to read, by its run id.
  std::string run_id;
  for (auto* command : {check, summary, analyze, diff, timeline, report, exp})
    command
        ->add_option("--run", run_id,
                     "when the traces hold several runs: the one to read, by its run id "
                     "(nemo.lens.run_uuid or nemo.run.id on the resource); LENS_RUN too")
        ->each([](const std::string& id) { ::setenv("LENS_RUN", id.c_str(), 1); });

  std::vector<std::string> upload_paths;
  std::string endpoint;
  std::size_t batch_spans = 2048;
  auto* up = app.add_subcommand(
      "upload", "send OTLP files (lens's, a collector's, Jaeger's, ...) to an OTLP/HTTP endpoint");
  up->add_option("PATHS", upload_paths, "run directories, spool directories or files")->required();
  up->add_option("--endpoint", endpoint,
                 "traces URL (default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else "
                 "OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces, else http://localhost:4318/v1/traces)");
  up->add_option("--batch-spans", batch_spans, "spans per request")->check(CLI::Range(1, 1 << 20));
  int max_attempts = 6;
  up->add_option("--max-attempts", max_attempts, "attempts per batch (retryable failures only)")
      ->check(CLI::Range(1, 100));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kOk : kBadInput;
  }

  if (up->parsed()) {
    lens::OtlpHttpOptions options;
    try {
      options = lens::resolve_config({}, lens::process_environment()).otlp;
    } catch (const lens::ConfigError& e) {
      std::fprintf(stderr, "lens: %s\n", e.what());
      return kBadInput;
    }
    if (!endpoint.empty()) {
      if (!(endpoint.starts_with("http://") || endpoint.starts_with("https://"))) {
        std::fprintf(stderr,
                     "lens: --endpoint '%s' is not valid; accepted: an http:// or https:// URL\n",
                     lens::redacted_url(endpoint).c_str());
        return kBadInput;
      }
      options.endpoint = endpoint;
    }
    options.max_attempts = max_attempts;
    std::vector<std::filesystem::path> paths(upload_paths.begin(), upload_paths.end());
    const bool tty = isatty(STDERR_FILENO);
    UploadReport report;
    try {
      report = upload(paths, options, batch_spans, [&](std::size_t done, std::size_t total) {
        if (!tty) return;
        const int width = 30;
        const int filled = static_cast<int>(width * done / std::max<std::size_t>(total, 1));
        std::fprintf(stderr, "\r[%s%s] %zu/%zu batches", std::string(filled, '#').c_str(),
                     std::string(width - filled, '.').c_str(), done, total);
        if (done == total) std::fprintf(stderr, "\n");
      });
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lens: %s\n", name_imports(e.what()).c_str());
      return kBadInput;
    }
    print_warnings(report.warnings);
    for (const auto& p : report.problems)
      std::fprintf(stderr, "lens: %s\n", name_imports(p).c_str());
    std::printf(
        "uploaded to %s: %zu spans sent (%zu rejected by the receiver), %zu failed; "
        "%zu files, %zu lines, %zu batches\n",
        lens::redacted_url(options.endpoint).c_str(), report.spans_sent, report.spans_rejected,
        report.spans_failed, report.files, report.lines, report.batches);
    return report.problems.empty() ? kOk : kViolations;
  }

  // Every command below reads the run a step at a time (step_stream.h);
  // the views put every rank on rank 0's clock unless --raw-clock.
  ClockAlignment clock;
  ClockReport clock_report;
  clock_report.raw_asked = raw_clock;
  LateSpans late_spans;
  const auto view_options = [&](const std::string& run_dir) {
    late_spans = {};
    if (!raw_clock) clock = read_clock_alignment(run_dir);
    clock_report = ClockReport::of(clock);
    clock_report.raw_asked = raw_clock;
    StreamOptions so = aligned_stream(clock, &clock_report, &late_spans);
    so.progress = reading_options().progress;
    return so;
  };
  try {
    const bool split = use_mpi || (launched_by_mpi() && have_mpi());
    if (check->parsed()) {
      const auto print = [&](const CheckResult& r) {
        print_warnings(r.warnings);
        for (const auto& v : r.violations)
          std::printf("FAIL %s\n", name_imports(format_violation(v)).c_str());
        if (r.unverifiable_links > 0)
          std::printf(
              "note: %zu links point at ranks the export filter left out; they cannot be "
              "verified\n",
              r.unverifiable_links);
        if (!r.start_order.empty()) std::printf("note: %s\n", r.start_order.c_str());
        const bool late_fails = r.late.late > 0 && !allow_late;
        if (r.late.late > 0) {
          const LateSpan& first = r.late.late_list.front();
          std::printf(
              "%s %zu spans arrived after their step had been checked and were not checked (the "
              "first: rank %d, %s line %zu, %s %s of step %lld)%s\n",
              late_fails ? "FAIL" : "note:", r.late.late, first.rank, first.path.filename().c_str(),
              first.line, first.name.c_str(), first.span_id.c_str(),
              static_cast<long long>(first.step),
              late_fails ? "; --allow-late to pass anyway" : "");
        }
        if (r.late.forgot)
          std::printf(
              "note: the run is long enough that span ids of early steps were forgotten: a span "
              "delivered twice long after its step is counted as late, not as a duplicate\n");
        if (r.stopped_spans > 0)
          std::printf(
              "note: the run was stopped by %s: %zu spans ended by it; %zu steps a rank was in "
              "then are not held to every rank or to the schedule's counts\n",
              r.stopped_by.c_str(), r.stopped_spans, r.interrupted_steps);
        if (!r.inferred.empty())
          std::printf("inferred: %s; each rank's step stays in a trace of its own (no links)\n",
                      r.inferred.c_str());
        std::printf("%s: %zu ranks, %zu steps, %zu spans: %s\n", dir.c_str(), r.files, r.steps,
                    r.spans,
                    late_fails ? (std::to_string(r.violations.size()) + " violations, " +
                                  std::to_string(r.late.late) + " spans not checked")
                                     .c_str()
                    : r.violations.empty()
                        ? (!r.inferred.empty()
                               ? "every rank's steps matched by step number (inferred: see above)"
                           : r.pipeline_scope ? "every replica's step is one trace, linked to rank "
                                                "0's; every link resolves"
                                              : "every step is one trace; every link resolves")
                        : (std::to_string(r.violations.size()) + " violations").c_str());
        return r.violations.empty() && !late_fails ? kOk : kViolations;
      };
      if (split) return mpi_check(dir, print);
      return print(check_dir(dir, reading_options()));
    }
    if (summary->parsed()) {
      const auto print = [&](const Summary& s, const std::vector<std::string>& warnings) {
        print_warnings(warnings);
        std::fputs((as_json ? format_json(s) : format_table(s)).c_str(), stdout);
      };
      if (split) return mpi_summary(dir, raw_clock, print);
      std::vector<std::string> warnings;
      Summary s = summarize_dir(dir, view_options(dir), &warnings);
      s.clock = clock_report;
      s.left_out = late_spans;
      print(s, warnings);
      return kOk;
    }
    const auto analyze_options = [&] {
      AnalyzeOptions o;
      o.raw_clock = raw_clock;
      o.progress = reading_options().progress;
      return o;
    };
    if (analyze->parsed()) {
      const auto print = [&](const Analysis& a, const std::vector<std::string>& warnings) {
        print_warnings(warnings);
        std::fputs((as_json    ? format_json(a)
                    : per_step ? format_per_step(a)
                               : format_table(a))
                       .c_str(),
                   stdout);
      };
      if (split) return mpi_analyze(dir, raw_clock, print);
      std::vector<std::string> warnings;
      const Analysis a = analyze_run(dir, analyze_options(), &warnings);
      print(a, warnings);
      return kOk;
    }
    if (diff->parsed()) {
      std::vector<std::string> warnings;
      const Analysis a = analyze_run(dir, analyze_options(), &warnings);
      const Analysis b = analyze_run(other_dir, analyze_options(), &warnings);
      print_warnings(warnings);
      std::printf("A: %s\nB: %s\n%s", dir.c_str(), other_dir.c_str(), format_diff(a, b).c_str());
      return kOk;
    }
    if (timeline->parsed()) {
      TimelineOptions o;
      const auto range = parse_step_range(steps);
      if (!range) {
        std::fprintf(stderr,
                     "lens: --steps '%s' is not valid; accepted: A-B or A (step numbers, A <= B)\n",
                     steps.c_str());
        return kBadInput;
      }
      std::tie(o.first_step, o.last_step) = *range;
      o.title = "lens timeline: " + dir + ", steps " + std::to_string(o.first_step) + "-" +
                std::to_string(o.last_step);
      // Only the chosen steps are kept, and reading stops after the last.
      StreamOptions so = view_options(dir);
      so.stop_after_step = o.last_step;
      std::map<std::filesystem::path, std::vector<SpanRow>> chosen;
      std::int64_t first_seen = std::numeric_limits<std::int64_t>::max();
      std::int64_t last_seen = std::numeric_limits<std::int64_t>::min();
      std::size_t drawn = 0;
      Run run = stream_steps(
          dir,
          [&](StepWindow& w) {
            first_seen = std::min(first_seen, w.step);
            last_seen = std::max(last_seen, w.step);
            if (w.step < o.first_step) return;
            ++drawn;
            for (auto& f : w.run.files)
              for (auto& s : f.spans) chosen[f.path].push_back(std::move(s));
          },
          so);
      for (auto& f : run.files) {
        print_warnings(f.warnings);
        auto& spans = chosen[f.path];
        f.spans.insert(f.spans.end(), std::make_move_iterator(spans.begin()),
                       std::make_move_iterator(spans.end()));
      }
      if (drawn == 0) {
        // Nothing to draw: say why instead of writing an empty page.
        if (first_seen > last_seen)
          std::fprintf(stderr,
                       "lens: %s has no steps (no megatron.train_step span with dl.step: record "
                       "the step span group); no timeline written\n",
                       dir.c_str());
        else
          std::fprintf(stderr,
                       "lens: no step in --steps %s (the run has steps %lld-%lld); no timeline "
                       "written\n",
                       steps.c_str(), static_cast<long long>(first_seen),
                       static_cast<long long>(last_seen));
        return kBadInput;
      }
      const PipelineView view = build_view(run);
      o.pipeline_of = pipelines_of(run);
      o.title += clock_report.aligned ? " (clock aligned to rank " +
                                            std::to_string(clock_report.reference_rank) + ")"
                                      : std::string(" (raw clocks)");
      if (!write_file(output, render_timeline(view, o))) return kBadInput;
      std::printf("wrote %s (%zu ranks, steps %lld-%lld)\n%s\n", output.c_str(), run.files.size(),
                  static_cast<long long>(o.first_step), static_cast<long long>(o.last_step),
                  clock_report.describe().c_str());
      if (const std::string l = late_spans.describe(); !l.empty()) std::printf("%s\n", l.c_str());
      return kOk;
    }
    if (report->parsed()) {
      ReportOptions o;
      o.raw_clock = raw_clock;
      o.progress = reading_options().progress;
      Report r;
      try {
        r = render_report(dir, o);
      } catch (const ReadError&) {
        throw;
      } catch (const std::runtime_error& e) {  // Chart.js missing
        std::fprintf(stderr, "lens: %s\n", e.what());
        return kBadInput;
      }
      print_warnings(r.warnings);
      // By default next to the traces: in the run's directory, or beside the
      // one file named.
      const std::filesystem::path run_path(dir);
      const std::string path = !report_output.empty() ? report_output
                               : std::filesystem::is_directory(run_path)
                                   ? (run_path / "report.html").string()
                                   : run_path.string() + ".report.html";
      if (!write_file(path, r.html)) return kBadInput;
      std::printf(
          "wrote %s (%zu steps%s; %s)\n%s\n", path.c_str(), r.steps,
          r.bucket > 1 ? (", charts over steps by " + std::to_string(r.bucket)).c_str() : "",
          r.median_step >= 0 ? ("the waves of step " + std::to_string(r.median_step) +
                                " (median) and " + std::to_string(r.slowest_step) + " (slowest)")
                                   .c_str()
                             : "no step to draw",
          r.clock.c_str());
      return kOk;
    }
    if (exp->parsed()) {
      if (perfetto.empty() && jaeger.empty()) {
        std::fprintf(stderr, "lens: export needs --perfetto FILE or --jaeger FILE\n");
        return kBadInput;
      }
      for (const auto& [path, perfetto_format] :
           {std::pair{perfetto, true}, std::pair{jaeger, false}}) {
        if (path.empty()) continue;
        std::ofstream out(path, std::ios::binary);
        if (!out) {
          std::fprintf(stderr, "lens: cannot write %s\n", path.c_str());
          return kBadInput;
        }
        ExportCounts c;
        try {
          c = perfetto_format ? export_perfetto(dir, out, view_options(dir))
                              : export_jaeger(dir, out, view_options(dir), jaeger_options);
        } catch (...) {
          out.close();
          std::filesystem::remove(path);  // no half-written file left behind
          throw;
        }
        out.close();
        if (!out) {
          std::fprintf(stderr, "lens: cannot write %s\n", path.c_str());
          return kBadInput;
        }
        print_warnings(c.warnings);
        std::printf("wrote %s: %zu spans, %zu links (%s)\n", path.c_str(), c.spans, c.links,
                    perfetto_format ? "open it in ui.perfetto.dev or chrome://tracing"
                                    : "load it in Jaeger UI: Search -> JSON File");
        std::printf("%s\n", clock_report.describe().c_str());
        if (const std::string l = late_spans.describe(); !l.empty()) std::printf("%s\n", l.c_str());
      }
      return kOk;
    }
  } catch (const ReadError& e) {
    std::fprintf(stderr, "lens: %s\n", name_imports(e.what()).c_str());
    return kBadInput;
  }
  return kOk;
}

// Memory held back for when an allocation fails. nlohmann::json frees a
// parsed document iteratively, with a vector of its own, inside a noexcept
// destructor: when memory runs out there, an exception would terminate the
// process. The first failure frees half the reserve and lets the allocation
// try again (a document being freed can then be freed); the second frees
// the rest and throws std::bad_alloc, so that what unwinds can free itself.
struct MemoryReserve {
  static constexpr std::size_t kBytes = std::size_t{32} << 20;
  static inline char* first = nullptr;
  static inline char* second = nullptr;
  static void on_failure() {
    if (first != nullptr) {
      delete[] std::exchange(first, nullptr);
      return;
    }
    if (second != nullptr) delete[] std::exchange(second, nullptr);
    throw std::bad_alloc();
  }
  static void install() {
    first = new char[kBytes];
    second = new char[kBytes];
    // Touch the pages so that the reserve is really memory, not a promise.
    std::memset(first, 1, kBytes);
    std::memset(second, 1, kBytes);
    std::set_new_handler(&on_failure);
  }
};

}  // namespace

// Whatever goes wrong (an unreadable directory, memory running out, a bug)
// ends as exit 2 with a message, never as a crash.
int main(int argc, char** argv) {
  try {
    MemoryReserve::install();
    remove_imports_on_signals();
    return run_lens(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "lens: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lens: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "lens: unexpected error\n");
  }
  return kBadInput;
}
