/// \file
/// An opt-in helper that turns SIGTERM and SIGINT (what SLURM sends on
/// preemption or a time limit, what Ctrl-C sends) into a flush of telemetry
/// instead of a loss. lens installs no signal handler unless asked.
///
/// watch_termination installs a handler for each signal that only records
/// the signal, writes one byte to a pipe and chains to the handler that was
/// there before (a function is called; SIG_IGN stays ignored). A thread of
/// lens, woken by the pipe, then does the work, never the handler:
/// - kExit (for a signal whose previous disposition was the default,
///   termination): notes the signal (Telemetry::note_stop_signal), shuts
///   telemetry down within `shutdown_timeout` (open spans end truncated,
///   marked lens.stopped_by=SIGTERM; what the backend does not take goes to
///   the spool), prints one line saying so, and ends the process by the
///   signal's default action, so its exit status is the conventional one
///   (128 + the signal: 143 for SIGTERM, 130 for SIGINT);
/// - kContinue (or a previous handler that is a function: the application
///   decides when to stop): notes the signal and flushes what has ended;
///   the application reads termination_signal() at a safe point (e.g. a
///   step boundary), stops, and shuts telemetry down as usual.
/// A second signal while the first is handled ends the process at once by
/// the default action.
///
/// What it does not do: stop the application's work (under kContinue the
/// application must look at termination_signal()), help against SIGKILL
/// (nothing can; a short OTEL_BSP_SCHEDULE_DELAY bounds what SIGKILL loses),
/// or install anything for other signals.
///
/// Thread safety: watch_termination and unwatch_termination from one
/// thread; termination_signal from any thread and from signal handlers.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace lens {

class Telemetry;

enum class OnTermination {
  kExit,      ///< flush, then end the process as the signal would have
  kContinue,  ///< flush what has ended; the application stops itself
};

struct TerminationOptions {
  std::vector<int> signals;  ///< empty: SIGTERM and SIGINT
  OnTermination then = OnTermination::kExit;
  /// The telemetry to flush; null: the process-wide one (get_telemetry) at
  /// the time of the signal. A given one must outlive the watch (or
  /// unwatch_termination be called before it is destroyed).
  Telemetry* telemetry = nullptr;
  /// kExit's shutdown bound; 0: the telemetry's own (OTEL_BSP_EXPORT_TIMEOUT).
  std::chrono::milliseconds shutdown_timeout{0};
};

/// Installs the handlers and starts the thread. Returns false (and changes
/// nothing) if a watch is already installed.
bool watch_termination(const TerminationOptions& options = {});

/// Restores the handlers that were there before and stops the thread.
void unwatch_termination();

/// The first watched signal received since watch_termination, or 0.
int termination_signal();

/// "SIGTERM", "SIGINT", ..., or "signal <n>".
std::string signal_name(int signo);

}  // namespace lens
