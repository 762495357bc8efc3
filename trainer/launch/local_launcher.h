/// \file
/// launch_local_ranks: starts the ranks of a job as processes on this machine
/// the way torchrun does (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
/// MASTER_ADDR, MASTER_PORT in each child's environment) and waits for them.
///
/// If a rank exits with an error or is killed, the others get `grace` to exit
/// on their own (their collectives fail and they report the lost peer); any
/// still running are then terminated. The result names the first rank that
/// failed, so a dead rank never leaves the job hanging.
///
/// SIGTERM or SIGINT to the launcher is forwarded to every rank (each in a
/// process group of its own, so Ctrl-C reaches a rank once, through the
/// launcher), and the launcher waits for them: a rank finishes its step,
/// flushes and exits 128 + the signal. A second signal is forwarded too
/// (a rank then ends at once). Ranks still running `grace` after the
/// first signal are killed. Each rank is told the launcher's pid
/// (kLauncherPidVariable) and stops when the launcher is gone, whatever
/// ended it (PR_SET_PDEATHSIG).
///
/// Thread safety: call from one thread; it blocks until every child is gone.
/// It installs its own SIGTERM and SIGINT handlers for the call.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace lens {

struct LaunchOptions {
  int world_size = 1;
  /// Program and arguments each rank runs (argv[0] is the path to execute).
  std::vector<std::string> argv;
  /// Extra environment for every rank.
  std::map<std::string, std::string> env;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::chrono::milliseconds grace{30000};
};

/// The environment variable that carries the launcher's pid to each rank.
inline constexpr const char* kLauncherPidVariable = "LENS_TRAIN_LAUNCHER_PID";

struct LaunchResult {
  int stopped_by = 0;            ///< the signal that stopped the job, or 0
  int exit_code = 0;             ///< 0 when every rank exited 0
  std::vector<int> rank_status;  ///< exit code, or 128 + signal
  int first_failed_rank = -1;
  std::string message;  ///< what went wrong, in words; empty on success
};

LaunchResult launch_local_ranks(const LaunchOptions& options);

}  // namespace lens
