// The cost of tracing on a real pipeline-parallel run: lens-train untraced
// (MEGATRON_OTEL_ENABLED=0), and traced with the default and with all span
// groups, each with broadcast step contexts (one broadcast per step, the
// reference page's) and with derived ones (LENS_STEP_CONTEXT=derived: no
// per-step collective), run alternately in one session; prints each mode's
// median step time and the ratios to untraced, beside the ratio of a second
// untraced run (what the machine's noise alone gives), and how long rank 0
// took to open a step (the step protocol on the source's training thread:
// a figure in microseconds that the machine's noise does not drown), and
// the same with live metrics on (--metrics-port 0).
//
//   lens_trainer_overhead [rounds] [steps]   (run from the build directory's bin/)
//
// The configuration (P = 2 so both ranks fit the 2 cores, 8 microbatches,
// hidden 128) gives steps of ~50 ms; the first 3 steps of every run are
// warm-up and not counted.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "train_report.h"

namespace {

namespace fs = std::filesystem;

// A run's counted steps: each step's time, both ranks, and how long rank
// 0's steps took to open (the step protocol on the source's training
// thread, microseconds).
struct Steps {
  std::vector<double> ms;
  std::vector<double> source_open_us;
};

Steps run(const std::string& trainer, const std::string& env, const std::string& flags, int steps,
          const fs::path& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir / "reports");
  const std::string cmd = "env " + env + " " + trainer +
                          " --pp 2 --microbatches 8 --hidden 128 --layers 8 --microbatch-size 32 "
                          "--steps " +
                          std::to_string(steps) + " " + flags + " --trace-dir " +
                          (dir / "traces").string() + " --report-dir " +
                          (dir / "reports").string() + " > " + (dir / "out.txt").string() + " 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "lens-train failed; see %s\n", (dir / "out.txt").c_str());
    std::exit(1);
  }
  Steps out;
  for (int rank = 0; rank < 2; ++rank) {
    auto report = lens::train::read_report(
        (dir / "reports" / ("rank-" + std::to_string(rank) + ".json")).string());
    for (std::size_t i = 3; i < report.steps.size(); ++i) {
      out.ms.push_back(report.steps[i].milliseconds);
      if (rank == 0) out.source_open_us.push_back(report.steps[i].open_microseconds);
    }
  }
  return out;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

double median(const std::vector<double>& v) { return percentile(v, 0.5); }

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 40;
  const std::string trainer =
      (fs::canonical("/proc/self/exe").parent_path() / "lens-train").string();
  const fs::path dir = fs::temp_directory_path() / "lens-trainer-overhead";
  struct Mode {
    const char* name;
    const char* env;
    const char* flags;
    std::vector<double> ms{};              // every counted step of every round
    std::vector<double> round_median{};    // this mode's median step, per round
    std::vector<double> source_open_us{};  // every counted step's opening on rank 0
  } modes[] = {
      {"untraced", "MEGATRON_OTEL_ENABLED=0", ""},
      // The same untraced run again: its ratio is the machine's own noise
      // between two runs of one configuration, against which the traced
      // modes' ratios are read.
      {"untraced, again", "MEGATRON_OTEL_ENABLED=0", ""},
      {"broadcast, default groups", "MEGATRON_OTEL_ENABLED=1 MEGATRON_OTEL_SPAN_GROUPS=default",
       "--step-context broadcast"},
      {"broadcast, all groups", "MEGATRON_OTEL_ENABLED=1 MEGATRON_OTEL_SPAN_GROUPS=all",
       "--step-context broadcast"},
      {"derived, default groups", "MEGATRON_OTEL_ENABLED=1 MEGATRON_OTEL_SPAN_GROUPS=default",
       "--step-context derived"},
      {"derived, all groups", "MEGATRON_OTEL_ENABLED=1 MEGATRON_OTEL_SPAN_GROUPS=all",
       "--step-context derived"},
      // Live metrics (docs/metrics.md) on, each rank's endpoint on a port of
      // its own choosing, nobody scraping: the per-step recording alone.
      {"untraced, metrics", "MEGATRON_OTEL_ENABLED=0", "--metrics-port 0 --metrics-linger 0"},
      {"derived, default, metrics", "MEGATRON_OTEL_ENABLED=1 MEGATRON_OTEL_SPAN_GROUPS=default",
       "--step-context derived --metrics-port 0 --metrics-linger 0"},
  };
  constexpr int kModes = sizeof(modes) / sizeof(modes[0]);
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < kModes; ++k) {
      Mode& m = modes[(r + k) % kModes];  // rotate which mode runs first
      const Steps got = run(trainer, m.env, m.flags, steps, dir);
      m.round_median.push_back(median(got.ms));
      m.ms.insert(m.ms.end(), got.ms.begin(), got.ms.end());
      m.source_open_us.insert(m.source_open_us.end(), got.source_open_us.begin(),
                              got.source_open_us.end());
    }
  }
  // Two figures per mode: the ratio of medians over all steps, and the
  // median of the per-round ratios (each round runs every mode back to back,
  // so a slow spell of the machine affects both sides of a round's ratio).
  const double base = median(modes[0].ms);
  for (const auto& m : modes) {
    std::vector<double> ratios;
    for (int r = 0; r < rounds; ++r) ratios.push_back(m.round_median[r] / modes[0].round_median[r]);
    std::sort(ratios.begin(), ratios.end());
    std::printf(
        "%-26s median step %7.2f ms over %zu steps   ratio to untraced %.3f   "
        "per-round ratio median %.3f (min %.3f, max %.3f)   step opening on rank 0: "
        "p50 %.1f us, p90 %.1f us\n",
        m.name, median(m.ms), m.ms.size(), median(m.ms) / base, median(ratios), ratios.front(),
        ratios.back(), median(m.source_open_us), percentile(m.source_open_us, 0.9));
  }
  fs::remove_all(dir);
  return 0;
}
