// Step figures: the process-wide switch, each thread's totals, and the
// timing of a span that is not recorded.
#include "lens/step_figures.h"

#include "lens/span.h"
#include "span_clock.h"

namespace lens {
namespace detail {

std::atomic<bool> g_step_figures{false};

namespace {
StepFigureTotals& thread_totals() {
  thread_local StepFigureTotals totals;
  return totals;
}
}  // namespace

}  // namespace detail

std::string_view step_figure_name(StepFigure figure) {
  switch (figure) {
    case StepFigure::kCompute:
      return "compute";
    case StepFigure::kP2pWait:
      return "p2p_wait";
    case StepFigure::kP2pSend:
      return "p2p_send";
    case StepFigure::kAllReduce:
      return "all_reduce";
    case StepFigure::kOptimizer:
      return "optimizer";
    case StepFigure::kNone:
      break;
  }
  return "none";
}

void set_step_figures(bool on) { detail::g_step_figures.store(on, std::memory_order_relaxed); }

bool step_figures_on() { return detail::g_step_figures.load(std::memory_order_relaxed); }

StepFigureTotals take_step_figures() {
  StepFigureTotals& totals = detail::thread_totals();
  const StepFigureTotals taken = totals;
  totals = {};
  return taken;
}

void add_step_figure(StepFigure figure, std::int64_t ns) {
  const auto i = static_cast<std::size_t>(figure);
  if (figure == StepFigure::kNone || i >= kStepFigureCount || ns < 0) return;
  StepFigureTotals& totals = detail::thread_totals();
  totals.ns[i] += ns;
  ++totals.spans[i];
}

std::uint64_t Span::start_metering(StepFigure figure) noexcept {
  return (static_cast<std::uint64_t>(detail::steady_now_ns()) << 3) |
         static_cast<std::uint64_t>(figure);
}

void Span::end_metering() noexcept {
  const std::uint64_t m = std::exchange(metered_, 0);
  const auto start = static_cast<std::int64_t>(m >> 3);
  add_step_figure(static_cast<StepFigure>(m & 7u), detail::steady_now_ns() - start);
}

}  // namespace lens
