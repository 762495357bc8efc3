#include "lens/termination.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "lens/telemetry.h"

namespace lens {
namespace {

constexpr int kMaxSignals = 8;

// What the handler reads: plain values and lock-free atomics only.
struct Watch {
  int signals[kMaxSignals] = {};
  struct sigaction previous[kMaxSignals] = {};
  int count = 0;
  int pipe_write = -1;  // the handler's end; the thread owns the other
  OnTermination then = OnTermination::kExit;
  Telemetry* telemetry = nullptr;
  std::chrono::milliseconds shutdown_timeout{0};
  int parent = 0;        // the parent when the watch began
  int death_signal = 0;  // PR_SET_PDEATHSIG's, or 0
};

Watch g_watch;
std::atomic<bool> g_installed{false};
std::atomic<int> g_signal{0};  // the first signal received
std::atomic<int> g_sender{0};  // who sent it (si_pid)

int slot_of(int signo) {
  for (int i = 0; i < g_watch.count; ++i)
    if (g_watch.signals[i] == signo) return i;
  return -1;
}

void on_signal(int signo, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  int expected = 0;
  const int sender = info != nullptr && info->si_code == SI_USER ? info->si_pid : 0;
  if (!g_signal.compare_exchange_strong(expected, signo)) {
    // A parent that dies with several threads sends its death signal
    // (PR_SET_PDEATHSIG) again each time the child passes to another of
    // its threads, then to the reaper: the death signal from the parent,
    // again, is the one signal already handled. (A launcher forwarding a
    // second signal sends it with sigqueue, SI_QUEUE: that one counts.)
    if (expected == signo && signo == g_watch.death_signal && sender != 0 &&
        sender == g_watch.parent && g_sender.load() == sender) {
      errno = saved_errno;
      return;
    }
    // A second signal: end at once, as the signal does by default.
    ::signal(signo, SIG_DFL);
    ::raise(signo);
    errno = saved_errno;
    return;
  }
  g_sender = sender;
  const char byte = static_cast<char>(signo);
  [[maybe_unused]] const ssize_t n = ::write(g_watch.pipe_write, &byte, 1);
  const int slot = slot_of(signo);
  if (slot >= 0) {
    const struct sigaction& prev = g_watch.previous[slot];
    if (prev.sa_flags & SA_SIGINFO) {
      if (prev.sa_sigaction != nullptr) prev.sa_sigaction(signo, info, context);
    } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN &&
               prev.sa_handler != nullptr) {
      prev.sa_handler(signo);
    }
  }
  errno = saved_errno;
}

// Whether `signo` was at its default action before the watch: only then
// does lens end the process (an application's handler, or SIG_IGN, decides
// otherwise). sa_handler and sa_sigaction share their storage: SIG_DFL is
// the null handler either way.
bool previous_was_default(int signo) {
  const int slot = slot_of(signo);
  return slot >= 0 && g_watch.previous[slot].sa_handler == SIG_DFL;
}

void handle(int signo) {
  Telemetry* t = g_watch.telemetry != nullptr ? g_watch.telemetry : get_telemetry();
  if (t != nullptr) t->note_stop_signal(signo);
  const bool exit = g_watch.then == OnTermination::kExit && previous_was_default(signo);
  const std::string name = signal_name(signo);
  if (!exit) {  // the application stops, and says so
    if (t != nullptr) t->flush(std::chrono::seconds(5));
    return;
  }
  if (t != nullptr) {
    if (g_watch.shutdown_timeout.count() > 0)
      t->shutdown(g_watch.shutdown_timeout);
    else
      t->shutdown();
  }
  std::fprintf(stderr, "lens: %s: telemetry shut down (open spans ended, truncated); exiting\n",
               name.c_str());
  std::fflush(nullptr);
  ::signal(signo, SIG_DFL);
  ::raise(signo);
}

// The thread is detached (a process may exit with the watch installed); it
// owns the pipe and closes it when unwatch_termination asks it to stop.
void run(int pipe_read, int pipe_write) {
  for (;;) {
    char byte = 0;
    const ssize_t n = ::read(pipe_read, &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || byte == 0) break;  // unwatch's stop byte
    handle(static_cast<unsigned char>(byte));
  }
  ::close(pipe_read);
  ::close(pipe_write);
}

}  // namespace

std::string signal_name(int signo) {
  switch (signo) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGKILL:
      return "SIGKILL";
    default:
      return "signal " + std::to_string(signo);
  }
}

int termination_signal() { return g_signal.load(); }

bool watch_termination(const TerminationOptions& options) {
  if (g_installed.exchange(true)) return false;
  std::vector<int> signals = options.signals;
  if (signals.empty()) signals = {SIGTERM, SIGINT};
  g_watch = Watch{};
  g_watch.then = options.then;
  g_watch.telemetry = options.telemetry;
  g_watch.shutdown_timeout = options.shutdown_timeout;
  g_watch.parent = ::getppid();
  int death_signal = 0;
  if (::prctl(PR_GET_PDEATHSIG, &death_signal) == 0) g_watch.death_signal = death_signal;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    g_installed = false;
    return false;
  }
  g_watch.pipe_write = fds[1];
  g_signal = 0;
  for (int signo : signals) {
    if (g_watch.count == kMaxSignals || slot_of(signo) >= 0) continue;
    g_watch.signals[g_watch.count] = signo;
    ++g_watch.count;
  }
  std::thread(run, fds[0], fds[1]).detach();
  for (int i = 0; i < g_watch.count; ++i) {
    struct sigaction sa {};
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(g_watch.signals[i], &sa, &g_watch.previous[i]);
  }
  return true;
}

void unwatch_termination() {
  if (!g_installed.load()) return;
  for (int i = 0; i < g_watch.count; ++i)
    ::sigaction(g_watch.signals[i], &g_watch.previous[i], nullptr);
  const char stop = 0;
  [[maybe_unused]] const ssize_t n = ::write(g_watch.pipe_write, &stop, 1);
  g_watch.count = 0;
  g_installed = false;
}

}  // namespace lens
