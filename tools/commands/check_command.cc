// lens check RUN_DIR: the run's cross-rank correlation; exit 0 ok, 1
// violated, 2 bad input.
#include <cstdio>
#include <memory>
#include <string>

#include "check.h"
#include "command.h"
#include "mpi_analyze.h"
#include "split_threads.h"
#include "run_import.h"
#include "span_kind.h"

namespace lens::tools::cli {

using namespace lens::analysis;

namespace {

struct CheckOptions {
  std::string dir;
  bool allow_late = false;
  bool use_mpi = false;
};

// The findings, the notes and the verdict line; returns the exit code.
int print_check(const CheckOptions& o, const CheckResult& r) {
  print_warnings(r.warnings);
  for (const auto& v : r.violations)
    std::printf("FAIL %s\n", name_imports(format_violation(v)).c_str());
  if (r.unverifiable_links > 0)
    std::printf(
        "note: %zu links point at ranks the export filter left out; they cannot be "
        "verified\n",
        r.unverifiable_links);
  if (!r.start_order.empty()) std::printf("note: %s\n", r.start_order.c_str());
  const bool late_fails = r.late.late > 0 && !o.allow_late;
  if (r.late.late > 0) {
    const LateSpan& first = r.late.late_list.front();
    std::printf(
        "%s %zu spans arrived after their step had been checked and were not checked (the "
        "first: rank %d, %s line %zu, %s %s of step %lld)%s\n",
        late_fails ? "FAIL" : "note:", r.late.late, first.rank, first.path.filename().c_str(),
        first.line, first.name.c_str(), first.span_id.c_str(), static_cast<long long>(first.step),
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
  // A run of no step has nothing correlated to pass: its step spans go by
  // another name, or its ranks did not record them.
  const bool no_step = r.steps == 0;
  if (no_step)
    std::printf(
        "FAIL no step span in the run: looked for %s; set LENS_STEP_SPAN to the name the "
        "run's step span has\n",
        step_names_looked_for().c_str());
  std::string verdict;
  if (no_step)
    verdict = "no steps";
  else if (late_fails)
    verdict = std::to_string(r.violations.size()) + " violations, " +
              std::to_string(r.late.late) + " spans not checked";
  else if (!r.violations.empty())
    verdict = std::to_string(r.violations.size()) + " violations";
  else if (!r.inferred.empty())
    verdict = "every rank's steps matched by step number (inferred: see above)";
  else if (r.pipeline_scope)
    verdict = "every replica's step is one trace, linked to rank 0's; every link resolves";
  else
    verdict = "every step is one trace; every link resolves";
  std::printf("%s: %zu ranks, %zu steps, %zu spans: %s\n", o.dir.c_str(), r.files, r.steps,
              r.spans, verdict.c_str());
  return r.violations.empty() && !late_fails && !no_step ? kOk : kViolations;
}

}  // namespace

Command add_check(CLI::App& lens) {
  auto o = std::make_shared<CheckOptions>();
  auto* check = lens.add_subcommand("check", "verify the run's cross-rank correlation");
  check->add_option("RUN_DIR", o->dir, kRunHelp)->required();
  check->add_flag("--allow-late", o->allow_late,
                  "pass even when spans arrived after their step was checked (they are counted, "
                  "not checked); a span delivered twice still fails");
  add_mpi_flag(check, o->use_mpi);
  add_reading_options(check, nullptr);
  return {check, [o] {
            const auto print = [&](const CheckResult& r) { return print_check(*o, r); };
            if (split_over_mpi(o->use_mpi)) return mpi_check(o->dir, print);
            const OpenedRun run(o->dir);
            const StreamOptions reading = reading_options();
            if (auto split = check_on_threads(run, default_read_threads(), reading.progress))
              return print(*split);
            return print(check_dir(run, reading));
          }};
}

}  // namespace lens::tools::cli
