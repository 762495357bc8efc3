#include "local_launcher.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

extern char** environ;

namespace lens {
namespace {

std::vector<std::string> child_environment(const LaunchOptions& o, int rank) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq != std::string::npos) vars[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [k, v] : o.env) vars[k] = v;
  vars["RANK"] = std::to_string(rank);
  vars["LOCAL_RANK"] = std::to_string(rank);
  vars["WORLD_SIZE"] = std::to_string(o.world_size);
  vars["LOCAL_WORLD_SIZE"] = std::to_string(o.world_size);
  vars["MASTER_ADDR"] = o.master_addr;
  vars["MASTER_PORT"] = std::to_string(o.master_port);
  // The launcher serves the rendezvous store, as torchrun's agent does.
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  vars[kLauncherPidVariable] = std::to_string(::getpid());
  std::vector<std::string> out;
  for (const auto& [k, v] : vars) out.push_back(k + "=" + v);
  return out;
}

volatile std::sig_atomic_t g_signals = 0;  // how many stop signals arrived
volatile std::sig_atomic_t g_last_signal = 0;

void on_stop_signal(int signo) {
  g_last_signal = signo;
  g_signals = g_signals + 1;
}

// The launcher's SIGTERM and SIGINT handlers, for the length of a launch.
class StopSignals {
 public:
  StopSignals() {
    g_signals = 0;
    g_last_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGTERM, &sa, &term_);
    ::sigaction(SIGINT, &sa, &int_);
  }
  ~StopSignals() {
    ::sigaction(SIGTERM, &term_, nullptr);
    ::sigaction(SIGINT, &int_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction term_ {
  }, int_{};
};

int status_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

LaunchResult launch_local_ranks(const LaunchOptions& o) {
  LaunchResult result;
  result.rank_status.assign(static_cast<std::size_t>(o.world_size), -1);
  std::vector<pid_t> pids(static_cast<std::size_t>(o.world_size), -1);
  std::vector<char*> argv;
  for (const auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  const StopSignals stop_signals;
  // Each rank in a process group of its own: a terminal's Ctrl-C reaches
  // the launcher only, which forwards it once.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  int running = 0;
  for (int r = 0; r < o.world_size; ++r) {
    auto env = child_environment(o, r);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, argv[0], nullptr, &attr, argv.data(), envp.data());
    if (rc != 0) {
      result.message =
          "cannot start rank " + std::to_string(r) + " (" + o.argv[0] + "): " + std::strerror(rc);
      result.first_failed_rank = r;
      result.exit_code = 1;
      break;
    }
    pids[static_cast<std::size_t>(r)] = pid;
    ++running;
  }

  posix_spawnattr_destroy(&attr);
  auto deadline = std::chrono::steady_clock::time_point::max();
  bool terminated = false;
  int forwarded = 0;  // stop signals passed on to the ranks
  if (result.exit_code != 0) deadline = std::chrono::steady_clock::now();
  while (running > 0) {
    if (g_signals > forwarded) {
      forwarded = g_signals;
      const int signo = g_last_signal;
      // sigqueue: a rank tells a forwarded signal (SI_QUEUE) from the
      // death signal it gets when the launcher goes (termination.h).
      for (pid_t p : pids)
        if (p > 0) sigqueue(p, signo, sigval{0});
      if (result.stopped_by == 0) {
        result.stopped_by = signo;
        std::fprintf(stderr,
                     "lens-train: %s: stopping the ranks (each finishes its step and flushes; "
                     "a second signal ends them at once)\n",
                     signo == SIGINT ? "SIGINT" : "SIGTERM");
        deadline = std::min(deadline, std::chrono::steady_clock::now() + o.grace);
      }
    }
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < o.world_size; ++r) {
        if (pids[static_cast<std::size_t>(r)] != pid) continue;
        pids[static_cast<std::size_t>(r)] = -1;
        --running;
        const int code = status_code(status);
        result.rank_status[static_cast<std::size_t>(r)] = code;
        // Stopping: a rank's exit by the signal's status is what was asked.
        const bool stopped = result.stopped_by != 0 && code == 128 + result.stopped_by;
        if (code != 0 && !stopped && result.first_failed_rank < 0) {
          result.first_failed_rank = r;
          result.exit_code = 1;
          result.message =
              "rank " + std::to_string(r) +
              (WIFSIGNALED(status) ? " was killed by signal " + std::to_string(WTERMSIG(status))
                                   : " exited with status " + std::to_string(code));
          deadline = std::chrono::steady_clock::now() + o.grace;
        }
      }
      continue;
    }
    if (pid < 0 && errno == ECHILD) break;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      // The others did not notice the lost rank in time: stop them.
      const int sig = terminated ? SIGKILL : SIGTERM;
      for (pid_t p : pids)
        if (p > 0) kill(p, sig);
      if (!terminated && running > 0)
        result.message += "; ranks still running after the grace period were terminated";
      terminated = true;
      deadline = now + std::chrono::seconds(5);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return result;
}

}  // namespace lens
