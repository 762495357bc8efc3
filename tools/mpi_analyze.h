// `lens analyze`, `summary` and `check` as an MPI job (docs/scale.md):
// `mpirun -n K lens analyze RUN` splits the run's steps between the K
// processes (partial_analysis.h) and rank 0 prints what one process would
// print, byte for byte.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "analyze.h"
#include "check.h"
#include "summary.h"

namespace lens::tools {

// Whether this process was started by an MPI launcher (mpirun, srun with
// PMIx): its environment names a world of more than one process.
bool launched_by_mpi();

// Whether this build has MPI.
bool have_mpi();

// Runs the analysis of `dir` over the MPI world; `print` is called on rank
// 0 with the result and its warnings. Returns the exit code every process
// exits with (0, or 2 after a read error, which rank 0 prints: the error of
// the earliest steps' process, the one a single process meets first).
int mpi_analyze(const std::string& dir, bool raw_clock,
                const std::function<void(const analysis::Analysis&,
                                         const std::vector<std::string>&)>& print);
// The same for `lens summary` (its clock report and spans left out set).
int mpi_summary(const std::string& dir, bool raw_clock,
                const std::function<void(const analysis::Summary&,
                                         const std::vector<std::string>&)>& print);
// The same for `lens check`: `print` (rank 0) returns the exit code.
int mpi_check(const std::string& dir,
              const std::function<int(const analysis::CheckResult&)>& print);

}  // namespace lens::tools
