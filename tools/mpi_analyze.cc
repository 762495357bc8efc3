// `lens analyze` as an MPI job (mpi_analyze.h).
#include "mpi_analyze.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <thread>

#include "partial_analysis.h"
#include "run_import.h"
#include "run_reader.h"
#include "step_stream.h"

#ifdef LENS_WITH_MPI
#include <mpi.h>
#endif

namespace lens::tools {

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(name); v != nullptr && std::atoi(v) > 1) return true;
  return false;
}

#ifndef LENS_WITH_MPI

bool have_mpi() { return false; }

namespace {
int without_mpi() {
  std::fprintf(stderr, "lens: this lens was built without MPI\n");
  return 2;
}
}  // namespace

int mpi_analyze(const std::string&, bool,
                const std::function<void(const analysis::Analysis&,
                                         const std::vector<std::string>&)>&) {
  return without_mpi();
}
int mpi_summary(const std::string&, bool,
                const std::function<void(const analysis::Summary&,
                                         const std::vector<std::string>&)>&) {
  return without_mpi();
}
int mpi_check(const std::string&, const std::function<int(const analysis::CheckResult&)>&) {
  return without_mpi();
}

#else

bool have_mpi() { return true; }

namespace {

// Every process gets rank 0's bytes.
void broadcast(std::string& bytes, int rank) {
  std::uint64_t size = bytes.size();
  MPI_Bcast(&size, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (rank != 0) bytes.resize(size);
  for (std::uint64_t at = 0; at < size;) {
    const int chunk = static_cast<int>(std::min<std::uint64_t>(size - at, INT_MAX / 2));
    MPI_Bcast(bytes.data() + at, chunk, MPI_BYTE, 0, MPI_COMM_WORLD);
    at += static_cast<std::uint64_t>(chunk);
  }
}

// Rank 0 gets every process's bytes, in rank order (each at most 1 GiB).
std::vector<std::string> gather(const std::string& mine, int rank, int size) {
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<std::size_t>(size));
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<int> at(static_cast<std::size_t>(size), 0);
  std::string all;
  if (rank == 0) {
    long long total = 0;
    for (int i = 0; i < size; ++i) {
      at[static_cast<std::size_t>(i)] = static_cast<int>(total);
      total += lengths[static_cast<std::size_t>(i)];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_Gatherv(mine.data(), length, MPI_BYTE, all.data(), lengths.data(), at.data(), MPI_BYTE, 0,
              MPI_COMM_WORLD);
  std::vector<std::string> parts;
  if (rank == 0)
    for (int i = 0; i < size; ++i)
      parts.push_back(all.substr(static_cast<std::size_t>(at[static_cast<std::size_t>(i)]),
                                 static_cast<std::size_t>(lengths[static_cast<std::size_t>(i)])));
  return parts;
}

// A process's outcome: 'k' and its part, or 'e' and the error it met.
std::string outcome(const std::function<std::string()>& work) {
  try {
    return "k" + work();
  } catch (const std::bad_alloc&) {
    return "eout of memory";
  } catch (const std::exception& e) {
    return std::string("e") + e.what();
  } catch (...) {
    return "eunexpected error";
  }
}

constexpr std::size_t kMaxPartBytes = std::size_t{1} << 30;

// One command split over the MPI world: rank 0 reads the step index and
// (unless `raw_clock`) the clock samples and broadcasts them; each process
// makes its range's part (`part`); rank 0 gathers them and `finish`es,
// returning the exit code. Returns the code every process exits with: that
// one, or 2 after an error, which rank 0 prints (the error of the earliest
// steps' process, the one a single process meets first).
int split_over_world(
    const std::string& dir, bool raw_clock,
    const std::function<std::string(const analysis::OpenedRun&, const analysis::StepIndex&,
                                    analysis::StepRange, const analysis::ClockAlignment&)>& part,
    const std::function<int(const analysis::OpenedRun&, const std::vector<std::string>&,
                            const analysis::ClockAlignment&)>& finish) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(nullptr, nullptr);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // The node's cores shared between its processes, unless --threads said.
  if (!analysis::read_threads_chosen()) {
    MPI_Comm node;
    int here = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
      MPI_Comm_size(node, &here);
      MPI_Comm_free(&node);
    }
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    analysis::set_default_read_threads(std::max(1, cores / std::max(1, here)));
  }
  // Rank 0 checks the layout and reads the saved step index, if the run has
  // one that still names its files. Then every process reads a share of
  // the files (every K-th from its rank): their clock samples and, without
  // a saved index, their step index; rank 0 joins the shares (and saves
  // the index), and every process gets the index and the samples, or the
  // error that stopped them.
  // The run, opened once in this process when first needed (inside the
  // calls whose errors every process agrees on).
  std::optional<analysis::OpenedRun> opened;
  const auto run = [&]() -> const analysis::OpenedRun& {
    if (!opened) opened.emplace(dir);
    return *opened;
  };
  std::string saved;  // 'k' and the saved index's bytes (none: empty), or 'e' and an error
  if (rank == 0)
    saved = outcome([&] {
      if (!analysis::is_lens_layout(dir) && !std::filesystem::is_regular_file(dir))
        throw analysis::ReadError(dir +
                                  ": under MPI, lens reads a run in lens's layout (a directory "
                                  "of rank-<r>.otlp.jsonl files) on a file system every process "
                                  "sees; for other layouts run it as one process");
      const auto index = analysis::saved_step_index(run());
      return index ? analysis::to_bytes(*index) : std::string();
    });
  broadcast(saved, rank);
  std::string first;  // 'k', the index's size, the index and the samples; or 'e' and an error
  if (!saved.empty() && saved[0] == 'k') {
    const bool build_index = saved.size() == 1;
    const std::string share = outcome([&] {
      const std::string index =
          build_index ? analysis::to_bytes(analysis::index_share(run(), rank, size)) : std::string();
      const std::string samples =
          raw_clock ? std::string() : analysis::clock_samples_share(run(), rank, size);
      const std::uint64_t n = index.size();
      return std::string(reinterpret_cast<const char*>(&n), sizeof n) + index + samples;
    });
    const std::vector<std::string> shares = gather(share, rank, size);
    if (rank == 0) {
      for (const auto& s : shares)
        if (!s.empty() && s[0] == 'e') {
          first = s;
          break;
        }
      if (first.empty())
        first = outcome([&] {
          std::vector<analysis::StepIndex> indexes;
          std::vector<std::string> samples;
          for (const auto& s : shares) {
            std::uint64_t n = 0;
            if (s.size() < 1 + sizeof n) throw std::runtime_error("a share's bytes end too soon");
            std::memcpy(&n, s.data() + 1, sizeof n);
            if (n > s.size() - 1 - sizeof n) throw std::runtime_error("a share is malformed");
            if (build_index)
              indexes.push_back(analysis::step_index_from_bytes(
                  std::string_view(s).substr(1 + sizeof n, n)));
            samples.push_back(s.substr(1 + sizeof n + n));
          }
          const std::string index =
              build_index ? analysis::to_bytes(analysis::join_index_shares(run(), std::move(indexes)))
                          : saved.substr(1);
          const std::uint64_t n = index.size();
          return std::string(reinterpret_cast<const char*>(&n), sizeof n) + index +
                 (raw_clock ? std::string() : analysis::join_clock_samples(samples));
        });
    }
    broadcast(first, rank);
  } else {
    first = saved;
  }
  int code = 0;
  if (first.empty() || first[0] == 'e') {
    if (rank == 0)
      std::fprintf(stderr, "lens: %s\n", first.empty() ? "no index" : first.c_str() + 1);
    code = 2;
  } else {
    std::uint64_t n = 0;
    std::memcpy(&n, first.data() + 1, sizeof n);
    const std::string_view index_bytes(first.data() + 1 + sizeof n, n);
    const std::string_view samples(first.data() + 1 + sizeof n + n,
                                   first.size() - 1 - sizeof n - n);
    const std::string mine = outcome([&] {
      const analysis::StepIndex index = analysis::step_index_from_bytes(index_bytes);
      const analysis::ClockAlignment clock =
          raw_clock ? analysis::ClockAlignment() : analysis::clock_from_samples(samples);
      const auto ranges = analysis::split_steps(index, size);
      std::string bytes = part(run(), index, ranges[static_cast<std::size_t>(rank)], clock);
      if (bytes.size() > kMaxPartBytes)
        throw std::runtime_error("one process's rows exceed 1 GiB: run with more processes");
      return bytes;
    });
    const std::vector<std::string> parts = gather(mine, rank, size);
    if (rank == 0) {
      // The error of the earliest steps, as one process would have met it.
      const std::string* error = nullptr;
      for (const auto& p : parts)
        if (!p.empty() && p[0] == 'e') {
          error = &p;
          break;
        }
      if (error != nullptr) {
        std::fprintf(stderr, "lens: %s\n", error->c_str() + 1);
        code = 2;
      } else {
        int finished = 2;
        const std::string done = outcome([&] {
          std::vector<std::string> rows;
          for (const auto& p : parts) rows.push_back(p.substr(1));
          const analysis::ClockAlignment clock =
              raw_clock ? analysis::ClockAlignment() : analysis::clock_from_samples(samples);
          finished = finish(run(), rows, clock);
          return std::string();
        });
        if (done[0] == 'e') {
          std::fprintf(stderr, "lens: %s\n", done.c_str() + 1);
          code = 2;
        } else {
          code = finished;
        }
      }
    }
    MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  }
  MPI_Finalize();
  return code;
}

}  // namespace

int mpi_analyze(const std::string& dir, bool raw_clock,
                const std::function<void(const analysis::Analysis&,
                                         const std::vector<std::string>&)>& print) {
  return split_over_world(
      dir, raw_clock,
      [&](const analysis::OpenedRun& run, const analysis::StepIndex& index,
          analysis::StepRange range, const analysis::ClockAlignment& clock) {
        return analysis::analyze_part(run, index, range, clock, false);
      },
      [&](const analysis::OpenedRun&, const std::vector<std::string>& parts,
          const analysis::ClockAlignment& clock) {
        std::vector<std::string> warnings;
        const analysis::Analysis a =
            analysis::merge_parts(parts, clock, raw_clock, false, &warnings);
        print(a, warnings);
        return 0;
      });
}

int mpi_summary(const std::string& dir, bool raw_clock,
                const std::function<void(const analysis::Summary&,
                                         const std::vector<std::string>&)>& print) {
  return split_over_world(
      dir, raw_clock,
      [&](const analysis::OpenedRun& run, const analysis::StepIndex& index,
          analysis::StepRange range, const analysis::ClockAlignment& clock) {
        return analysis::summary_part(run, index, range, clock);
      },
      [&](const analysis::OpenedRun&, const std::vector<std::string>& parts,
          const analysis::ClockAlignment& clock) {
        std::vector<std::string> warnings;
        const analysis::Summary s =
            analysis::merge_summary_parts(parts, clock, raw_clock, &warnings);
        print(s, warnings);
        return 0;
      });
}

int mpi_check(const std::string& dir,
              const std::function<int(const analysis::CheckResult&)>& print) {
  // Start times are compared on the run's clock samples (check_dir); the
  // windows themselves are read on each rank's own clock.
  return split_over_world(
      dir, false,
      [&](const analysis::OpenedRun& run, const analysis::StepIndex& index,
          analysis::StepRange range, const analysis::ClockAlignment& clock) {
        return analysis::check_part(run, index, range, analysis::start_order_of(run, clock));
      },
      [&](const analysis::OpenedRun& run, const std::vector<std::string>& parts,
          const analysis::ClockAlignment& clock) {
        return print(analysis::merge_check_parts(parts, run, analysis::start_order_of(run, clock)));
      });
}

#endif

}  // namespace lens::tools
