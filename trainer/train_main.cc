// lens-train: a real pipeline-parallel trainer on libtorch running
// Megatron's 1F1B schedule, traced with lens. See README, "The demo".
//
// Without RANK in the environment it is the launcher: it runs a TCPStore on
// a free 127.0.0.1 port, starts pp x dp x tp ranks of itself, waits for them
// (a rank that dies makes the others stop), and prints a summary. With
// torchrun's variables set (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) it
// runs as that one rank; rank 0 serves the rendezvous store unless
// TORCHELASTIC_USE_AGENT_STORE=True (rendezvous_store, gloo_job.h).
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "gloo_job.h"
#include "lens/broadcast_trace_context.h"
#include "lens/c10d_communicator.h"
#include "lens/error.h"
#include "lens/live_stragglers.h"
#include "lens/metrics.h"
#include "lens/metrics_endpoint.h"
#include "lens/metrics_exporter.h"
#include "lens/pipeline_stats.h"
#include "lens/startup_agreement.h"
#include "lens/step_context.h"
#include "lens/step_figures.h"
#include "lens/step_meeting.h"
#include "lens/step_metrics.h"
#include "lens/step_trace.h"
#include "lens/termination.h"
#include "local_launcher.h"
#include "pipeline_schedule.h"
#include "rank_metrics.h"
#include "train_options.h"
#include "train_report.h"
#include "work_wait.h"
#include "lens/semconv.h"

namespace lens::train {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > (1 << 30)) {
    std::fprintf(stderr, "lens-train: %s='%s' is not valid; accepted: a non-negative integer\n",
                 name, v);
    std::exit(2);
  }
  return static_cast<int>(x);
}

c10::intrusive_ptr<c10d::ProcessGroup> subgroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                const std::string& name, int rank, int size,
                                                std::chrono::milliseconds timeout,
                                                const std::string& addr) {
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, store);
  return make_gloo_process_group(prefixed, rank, size, timeout, addr);
}

// Sums the gradients of the data-parallel replicas (one all-reduce of all
// gradients flattened together) and averages them.
void all_reduce_gradients(const std::vector<torch::Tensor>& parameters,
                          c10d::ProcessGroup& dp_group, int dp, std::chrono::milliseconds timeout) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad().view(-1));
  if (grads.empty()) return;
  std::vector<torch::Tensor> flat{torch::cat(grads)};
  if (!dp_group.allreduce(flat)->wait(timeout))
    throw std::runtime_error("gradient all-reduce timed out");
  flat[0].div_(dp);
  std::int64_t offset = 0;
  for (auto& g : grads) {
    g.copy_(flat[0].slice(0, offset, offset + g.numel()));
    offset += g.numel();
  }
}

// Ends the termination watch when the rank's telemetry goes.
struct TerminationWatch {
  explicit TerminationWatch(Telemetry* telemetry) {
    TerminationOptions w;
    w.then = OnTermination::kContinue;  // the rank finishes its step, then stops
    w.telemetry = telemetry;
    watch_termination(w);
  }
  ~TerminationWatch() { unwatch_termination(); }
  TerminationWatch(const TerminationWatch&) = delete;
  TerminationWatch& operator=(const TerminationWatch&) = delete;
};

// The rank's process groups: the world; its pipeline (the same replica and
// TP rank on every stage); its data-parallel group (the same stage and TP
// rank) and TP group (the same stage and replica), null where the axis has
// one rank.
struct RankGroups {
  c10::intrusive_ptr<c10d::ProcessGroup> world, pp, dp, tp;
};

RankGroups join_groups(const TrainOptions& o, const RankPlace& at, const std::string& addr,
                       int port, std::chrono::milliseconds timeout) {
  // PyTorch's env:// rule: rank 0 serves the store, unless the launcher's
  // agent does (TORCHELASTIC_USE_AGENT_STORE=True).
  const int world = o.world();
  auto store = rendezvous_store(addr, static_cast<std::uint16_t>(port), at.rank, world, timeout);
  const auto tag = [](const char* axis, int a, int b) {
    return std::string(axis) + std::to_string(a) + "." + std::to_string(b) + "/";
  };
  RankGroups g;
  g.world = subgroup(store, "world/", at.rank, world, timeout, addr);
  g.pp = subgroup(store, tag("pp", at.replica, at.tensor), at.stage, o.pp, timeout, addr);
  if (o.dp > 1)
    g.dp = subgroup(store, tag("dp", at.stage, at.tensor), at.replica, o.dp, timeout, addr);
  if (o.tp > 1)
    g.tp = subgroup(store, tag("tp", at.stage, at.replica), at.tensor, o.tp, timeout, addr);
  return g;
}

// The rank's telemetry settings from its options (the rest from the
// environment, as lens::init reads it).
TelemetryOptions telemetry_options(const TrainOptions& o, const RankPlace& at,
                                   std::chrono::milliseconds timeout) {
  TelemetryOptions topts;
  topts.enabled = o.otel_enabled;
  topts.span_groups = o.otel_span_groups;
  topts.service_name = o.otel_service_name;
  topts.trace_dir = o.trace_dir;
  topts.collective_timeout = timeout;
  topts.coordinates = {at.stage, at.replica, at.tensor};
  // The world group carries nothing else during a step, so the next step's
  // broadcast can be in flight meanwhile (StepTrace prefetches in world
  // scope only: in pipeline scope the pipeline group carries the schedule's
  // p2p transfers). Agreed at start-up.
  topts.step_prefetch = o.step_prefetch;
  if (o.step_context)
    topts.step_context =
        *o.step_context == "derived" ? StepContextMode::kDerived : StepContextMode::kBroadcast;
  const auto r = static_cast<std::size_t>(at.rank);
  if (!o.test_clock_offsets_us.empty())
    topts.test_clock_offset_ns = static_cast<std::int64_t>(o.test_clock_offsets_us[r] * 1e3);
  if (!o.test_clock_drift_ppm.empty()) topts.test_clock_drift_ppm = o.test_clock_drift_ppm[r];
  return topts;
}

// The stage's model: the model's blocks split into pp x V chunks (the
// first ones one block more when they do not divide); chunk v of this
// stage is global chunk v * pp + stage, and the last global chunk carries
// the head. With V = 1 that is one chunk per stage.
std::vector<StageModel> stage_chunks(const TrainOptions& o, int stage, TensorParallel* tp) {
  const int chunk_count = o.pp * o.virtual_stages;
  const int per_chunk = o.layers / chunk_count;
  const int extra = o.layers % chunk_count;  // the first `extra` chunks get one more block
  std::vector<StageModel> chunks;
  for (int v = 0; v < o.virtual_stages; ++v) {
    const int g = v * o.pp + stage;
    const int first_layer = g * per_chunk + std::min(g, extra);
    chunks.emplace_back(first_layer, per_chunk + (g < extra ? 1 : 0), o.hidden,
                        g == chunk_count - 1, o.seed, tp);
  }
  return chunks;
}

std::vector<torch::Tensor> parameters_of(const std::vector<StageModel>& chunks) {
  std::vector<torch::Tensor> parameters;
  for (const auto& chunk : chunks)
    for (auto& p : chunk->parameters()) parameters.push_back(p);
  return parameters;
}

// What the schedule is given: the model, the data and the transfers, and
// the fault injections and test aids that apply to this rank.
ScheduleContext schedule_context(const TrainOptions& o, const RankPlace& at,
                                 const std::vector<StageModel>& chunks, const SyntheticData& data,
                                 P2PCommunicator& p2p, const StepTrace& step_trace,
                                 TensorParallel* tp) {
  ScheduleContext ctx;
  ctx.model = chunks.front();
  ctx.data = &data;
  ctx.p2p = &p2p;
  ctx.step_trace = &step_trace;
  ctx.tracer = step_trace.tracer();
  ctx.microbatches = o.microbatches;
  ctx.replica = at.replica;
  const bool slowed = o.slow_rank >= 0 ? at.rank == o.slow_rank
                                       : at.stage == o.slow_stage &&
                                             (o.slow_replica < 0 || o.slow_replica == at.replica);
  if (slowed) {
    ctx.slow_factor = o.slow_factor;
    ctx.slow_delay_ms = o.slow_ms;
  }
  ctx.slow_from_step = o.slow_from_step;
  ctx.slow_steps = o.slow_steps;
  if (o.virtual_stages > 1) ctx.chunks = chunks;
  ctx.microbatch_jitter = o.microbatch_jitter;
  ctx.compute_floor_ms = o.test_compute_ms;
  ctx.seed = o.seed;
  ctx.tp = tp;
  return ctx;
}

// The meeting (step_meeting.h): every --live-every steps one all-gather
// of each rank's median compute over the window, which every rank judges
// alike (rank 0 says what it found); with tail selection (agreed at
// start-up, so the same on every rank) each step is held and at each
// meeting every rank's time of each step of the window gathered and the
// same steps kept everywhere; with --metrics-job every rank's step
// metrics go to rank 0. The meeting is --live-every's, else every 10
// steps.
StepMeetingOptions meeting_options(const TrainOptions& o, int rank, RankMetrics& metrics,
                                   std::chrono::milliseconds timeout) {
  StepMeetingOptions mopts;
  mopts.live_every = o.live_every;
  for (int r = 0; r < o.world(); ++r)
    mopts.ranks.push_back({r, o.stage_of(r), o.replica_of(r), o.tensor_of(r)});
  mopts.extra_words = metrics.meeting_words();
  mopts.timeout = timeout;
  mopts.who = "lens-train: rank " + std::to_string(rank);
  return mopts;
}

// A rank's training loop, over what run_rank set up.
struct StepLoop {
  const TrainOptions& o;
  RankPlace at;
  Telemetry* telemetry;
  StepTrace& step_trace;
  ScheduleContext& ctx;
  torch::optim::Adam& optimizer;
  const std::vector<torch::Tensor>& parameters;
  c10d::ProcessGroup* dp_group;
  StepMeeting& meeting;
  RankMetrics& metrics;
  std::function<void(const std::string&)> record_failure;
  std::chrono::milliseconds timeout;
  int completed = 0;  // steps done

  // Every step in the job's one trace: every rank's job span in it (ids
  // from the agreed run key), rank 0's the one the others link to; each
  // step links to it. Throws what a step throws.
  void run(RankReport& report) {
    const Tracer& tracer = ctx.tracer;
    Span job = telemetry ? tracer.start_span(SpanGroup::kJob, semconv::kJobSpan,
                                             job_span_start(*telemetry, at.rank))
                         : Span();
    step_trace.set_job_span(job);
    job.set_attribute(semconv::kPipelineSize, o.pp);
    job.set_attribute(semconv::kDataSize, o.dp);
    job.set_attribute(semconv::kTensorSize, o.tp);
    job.set_attribute(semconv::kNumMicrobatches, o.microbatches);
    job.set_attribute(semconv::kVirtualPipelineSize, o.virtual_stages);
    for (int step = 0; step < o.steps; ++step) {
      if (termination_signal() != 0) break;  // between steps: a clean stop
      report.steps.push_back(run_step(step));
      ++completed;
    }
    // After the last step (every rank ran the same steps): tail
    // selection's last, partial window, and the job's final metrics.
    if (termination_signal() == 0)
      if (const auto met = meeting.finish(o.steps - 1)) after_meeting(*met);
    if (meeting.tail_selection() && at.rank == 0) say_tail_selection();
    metrics.steps_done();
    // Stopped: the closing clock sample is a collective the others may
    // not reach.
    if (termination_signal() == 0) step_trace.finish();
  }

  StepReport run_step(int step) {
    const Tracer& tracer = ctx.tracer;
    const auto start = std::chrono::steady_clock::now();
    SpanContext step_context;  // the step span's, for the metrics' exemplars
    StepFigureTotals figures;  // what the step's spans measured
    StepReport sr;
    sr.step = step;
    {
      // Stopping, and a peer stopped first (its transfers fail): the step
      // span ends marked with the signal (StepScope), the rest at the
      // shutdown.
      const int skew = at.rank == o.test_step_skew_rank ? 1 : 0;
      take_step_figures();  // from here on, this step's
      StepScope step_scope(step_trace, static_cast<std::uint64_t>(step + skew));
      step_context = step_scope.span().context();
      if (meeting.tail_selection())
        telemetry->hold_step(static_cast<std::uint64_t>(step), step_context);
      sr.open_microseconds =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count();
      if (step_scope.carrier()) sr.trace_id = step_scope.carrier()->context.trace_id.to_hex();
      optimizer.zero_grad();
      if (ctx.tp) ctx.tp->begin_step();
      double loss;
      {
        Span fb = tracer.start_span(SpanGroup::kForwardBackward, semconv::kForwardBackwardSpan);
        fb.set_attribute(semconv::kNumMicrobatches, o.microbatches);
        fb.set_attribute(semconv::kVirtualPipelineSize, o.virtual_stages);
        // The schedule's spans nest inside it, as Megatron's do.
        CurrentSpanScope fb_scope(fb);
        loss = o.virtual_stages > 1 ? forward_backward_interleaved(ctx, step)
                                    : forward_backward_1f1b(ctx, step);
      }
      if (dp_group != nullptr) {
        Span ar = tracer.start_span(SpanGroup::kCommunication, semconv::kGradsAllReduceSpan,
                                    StepFigure::kAllReduce);
        try {
          all_reduce_gradients(parameters, *dp_group, o.dp, timeout);
        } catch (const std::exception& e) {
          record_failure(std::string("gradient all-reduce over the data-parallel group failed: ") +
                         e.what());
          throw;
        }
      }
      {
        Span opt = tracer.start_span(SpanGroup::kOptimizer, semconv::kOptimizerStepSpan);
        optimizer.step();
      }
      figures = take_step_figures();
      if (!std::isnan(loss)) {
        sr.loss = loss;
        step_scope.span().set_attribute("dl.loss", loss);
      }
      // The step's work, from before its span opened to after the
      // optimizer: what a slow step is slow in.
      const double step_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (meeting.step_done(static_cast<std::uint64_t>(step),
                            figures.seconds(StepFigure::kCompute) * 1e3, step_seconds))
        after_meeting(meeting.meet(step, &step_scope.span()));
    }
    sr.milliseconds =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    metrics.record_step(step, sr.milliseconds / 1e3, figures, step_context);
    return sr;
  }

  // What a meeting brought: rank 0 names the stragglers; the metrics take
  // the rest.
  void after_meeting(const MeetingOutcome& met) {
    if (at.rank == 0)
      for (const LiveStraggler& s : met.stragglers)
        std::fprintf(stderr, "lens-train: live: %s\n", s.describe().c_str());
    metrics.met(met);
  }

  void say_tail_selection() const {
    const auto hold = telemetry->stats().hold;
    if (!hold) return;
    std::fprintf(stderr,
                 "lens-train: tail selection: %llu steps held, %llu kept, %llu not selected "
                 "(rank 0; the hold at most %.1f MiB)\n",
                 static_cast<unsigned long long>(hold->steps_held),
                 static_cast<unsigned long long>(hold->steps_kept),
                 static_cast<unsigned long long>(hold->steps_not_selected),
                 static_cast<double>(hold->bytes_peak) / (1 << 20));
  }
};

// The end of a rank that ran its steps: what the run did, its telemetry
// shut down (within OTEL_BSP_EXPORT_TIMEOUT; what is not delivered by then
// goes to the spool, when one is set) and accounted for.
void close_report(RankReport& report, Telemetry* telemetry) {
  const PipelineStats pipeline = pipeline_stats();
  report.broadcasts = pipeline.broadcasts;
  report.derived_steps = pipeline.derived_steps;
  report.step_checks = pipeline.step_checks;
  if (!telemetry) return;
  report.tracing = true;
  report.span_groups = telemetry->span_groups().to_spec();
  report.run_id = telemetry->config().run_id;
  report.trace_file = telemetry->trace_file();
  if (telemetry->config().exporter == "otlp")
    report.otlp_endpoint = telemetry->config().otlp.endpoint;
  telemetry->shutdown();
  const auto all = telemetry->stats();
  report.spans = SpanAccount::of(all);
  report.queue_high_water = all.processor.queue_high_water;
  if (all.delivery) {
    report.otlp_requests = all.delivery->requests;
    report.otlp_retries = all.delivery->retries;
    report.backend_unhealthy = all.delivery->backend_unhealthy;
  }
}

int run_rank(const TrainOptions& o) {
  const int rank = env_int("RANK", 0);
  const int world = env_int("WORLD_SIZE", 1);
  // A write to a socket whose peer is gone (the launcher's rendezvous
  // store, a stopped rank) fails with EPIPE instead of killing the rank, as
  // in a Python process: the rank can then stop as it should.
  ::signal(SIGPIPE, SIG_IGN);
  // A rank of lens-train's launcher stops when the launcher is gone,
  // whatever ended it: the kernel then sends it SIGTERM, which stops it as
  // a signal to the rank does. Started after the launcher went: no start.
  if (const char* launcher = std::getenv(kLauncherPidVariable)) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != std::atoi(launcher)) {
      std::fprintf(stderr, "lens-train: rank %d: its launcher is gone; not starting\n", rank);
      return 128 + SIGTERM;
    }
  }
  if (world != o.world()) {
    std::fprintf(stderr,
                 "lens-train: WORLD_SIZE=%d but --pp %d x --dp %d x --tp %d = %d; accepted: "
                 "WORLD_SIZE equal to pp x dp x tp\n",
                 world, o.pp, o.dp, o.tp, o.world());
    return 2;
  }
  const std::string addr = std::getenv("MASTER_ADDR") ? std::getenv("MASTER_ADDR") : "127.0.0.1";
  const int port = env_int("MASTER_PORT", 29500);
  const std::chrono::milliseconds timeout(static_cast<std::int64_t>(o.timeout_s) * 1000);
  // Megatron's rank order: tensor-parallel fastest, then data-parallel.
  const RankPlace at{rank, o.stage_of(rank), o.replica_of(rank), o.tensor_of(rank)};
  torch::set_num_threads(1);

  const RankGroups groups = join_groups(o, at, addr, port, timeout);
  C10dCommunicator world_comm(groups.world);
  C10dCommunicator pp_comm(groups.pp);
  std::unique_ptr<Telemetry> telemetry;
  MetricsExportConfig metrics_export;  // OTEL_METRICS_EXPORTER=otlp: to /v1/metrics
  try {
    telemetry = create_distributed_telemetry(world_comm, o.pp, telemetry_options(o, at, timeout));
    metrics_export = resolve_metrics_export();
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "lens-train: rank %d: %s\n", rank, e.what());
    return 2;
  }
  // SIGTERM or SIGINT: finish the step, end what is open (truncated), flush,
  // say why, exit 128 + the signal. A second one ends the rank at once.
  TerminationWatch termination(telemetry.get());
  StepTraceOptions sopts;
  sopts.pipeline_parallel_size = o.pp;
  sopts.pipeline_rank = at.stage;
  // Clocks are measured against global rank 0, and steps checked, over the
  // world group.
  sopts.job_communicator = &world_comm;
  // World scope: rank 0 broadcasts to every rank. Pipeline scope (agreed at
  // start-up): each replica's first stage broadcasts over its pipeline group.
  const bool pipeline_scope = telemetry && telemetry->config().trace_scope == TraceScope::kPipeline;
  StepTrace step_trace(telemetry.get(), pipeline_scope ? &pp_comm : &world_comm, sopts);
  const Tracer tracer = step_trace.tracer();

  std::unique_ptr<TensorParallel> tp;
  if (groups.tp)
    tp = std::make_unique<TensorParallel>(groups.tp, at.tensor, o.tp, timeout, tracer);
  const std::vector<StageModel> chunks = stage_chunks(o, at.stage, tp.get());
  const std::vector<torch::Tensor> parameters = parameters_of(chunks);
  SyntheticData data(o.hidden, o.microbatch_size, o.seed);
  torch::optim::Adam optimizer(parameters, torch::optim::AdamOptions(o.lr));
  P2PCommunicator p2p(groups.pp, at.stage, o.pp, {o.microbatch_size, o.hidden}, timeout, tracer);
  // What this rank was doing when a transfer failed (a lost peer, a timeout):
  // in the log and as a final event on its open spans, so the rank that
  // diverged can be found, as one would with PyTorch's flight recorder.
  // The same for the data-parallel gradient all-reduce and the
  // tensor-parallel collectives.
  const auto record_failure = [&](const std::string& what) {
    if (telemetry)
      write_failure_record(*telemetry, "lens-train: rank " + std::to_string(rank), what);
  };
  p2p.on_failure(record_failure);
  if (tp) tp->on_failure(record_failure);
  ScheduleContext ctx = schedule_context(o, at, chunks, data, p2p, step_trace, tp.get());
  RankMetrics metrics(o, at, telemetry.get(), metrics_export);
  StepMeeting meeting(telemetry.get(), world_comm, meeting_options(o, rank, metrics, timeout));
  if (const std::string w = meeting.hold_warning(); rank == 0 && !w.empty())
    std::fprintf(stderr, "lens-train: warning: %s\n", w.c_str());
  std::unique_ptr<SimulatedDevice> device;
  if (o.test_simulated_device > 0) {
    device = SimulatedDevice::open(o.test_simulated_device, rank);
    ctx.device = device.get();
  }

  RankReport report;
  report.rank = rank;
  report.stage = at.stage;
  report.replica = at.replica;
  report.tensor = at.tensor;
  StepLoop loop{o,         at,      telemetry.get(), step_trace, ctx,           optimizer,
                parameters, groups.dp.get(), meeting,   metrics,    record_failure, timeout};
  const auto stop_line = [&](int signo, const std::string& detail) {
    const int completed = loop.completed;
    const std::string when =
        completed > 0 ? "after step " + std::to_string(completed - 1) : "before its first step";
    std::fprintf(stderr, "lens-train: rank %d: stopped by %s %s (%d steps done)%s\n", rank,
                 signal_name(signo).c_str(), when.c_str(), completed, detail.c_str());
  };
  try {
    loop.run(report);
  } catch (const std::exception& e) {
    if (const int signo = termination_signal()) {
      stop_line(signo, "; a peer stopped first (" + std::string(e.what()) + ")");
      if (telemetry) telemetry->shutdown();
      return 128 + signo;
    }
    // The spans open at the failure carry a lens.failure event (see
    // report_failure); export what there is before leaving.
    std::fprintf(stderr, "lens-train: rank %d (stage %d): error: %s\n", rank, at.stage, e.what());
    if (telemetry) telemetry->shutdown(std::chrono::seconds(10));
    return 1;
  }
  if (const int signo = termination_signal()) {
    // Between steps: nothing is open but the job span.
    if (telemetry) telemetry->shutdown();
    stop_line(signo, telemetry ? "; spans: " + SpanAccount::of(telemetry->stats()).describe() : "");
    return 128 + signo;
  }
  close_report(report, telemetry.get());
  // Every rank finishes its collectives before any tears its groups down.
  groups.world->barrier()->wait(timeout);
  if (!o.report_dir.empty()) {
    write_report(report, o.report_dir + "/rank-" + std::to_string(rank) + ".json");
  } else {
    const auto& last = report.steps.back();
    std::printf(
        "lens-train rank %d (stage %d, replica %d, tp %d): %zu steps, last step %.1f ms%s\n", rank,
        at.stage, at.replica, at.tensor, report.steps.size(), last.milliseconds,
        last.loss ? (", loss " + std::to_string(*last.loss)).c_str() : "");
  }
  metrics.finish();
  return 0;
}

int launch(const TrainOptions& o) {
  std::string report_dir = o.report_dir;
  bool temporary = false;
  if (report_dir.empty()) {
    char pattern[] = "/tmp/lens-train-XXXXXX";
    if (mkdtemp(pattern) == nullptr) {
      std::perror("lens-train: cannot create a report directory");
      return 1;
    }
    report_dir = pattern;
    temporary = true;
  }
  std::filesystem::create_directories(report_dir);
  TcpStoreServer server(std::chrono::seconds(o.timeout_s));
  LaunchOptions launch;
  launch.world_size = o.world();
  launch.argv.push_back(std::filesystem::canonical("/proc/self/exe").string());
  launch.argv.insert(launch.argv.end(), o.args.begin(), o.args.end());
  if (o.report_dir.empty()) {
    launch.argv.push_back("--report-dir");
    launch.argv.push_back(report_dir);
  }
  launch.master_port = server.port();
  // Longer than the collective timeout: a survivor blocked on the lost rank
  // gets to notice, write its failure record and flush its spans.
  launch.grace = std::chrono::seconds(o.timeout_s + 10);
  std::fprintf(stderr, "lens-train: starting %d ranks (pp=%d x dp=%d x tp=%d) on 127.0.0.1:%d\n",
               launch.world_size, o.pp, o.dp, o.tp, launch.master_port);
  LaunchResult result = launch_local_ranks(launch);
  if (result.stopped_by != 0) {
    // Each rank said why and at which step it stopped; the launcher sums up.
    std::string statuses;
    for (std::size_t r = 0; r < result.rank_status.size(); ++r)
      statuses +=
          (r ? ", " : "") + std::to_string(r) + ": " + std::to_string(result.rank_status[r]);
    std::fprintf(stderr, "lens-train: stopped by %s; rank exit statuses %s%s\n",
                 signal_name(result.stopped_by).c_str(), statuses.c_str(),
                 result.message.empty() ? "" : ("; " + result.message).c_str());
    if (temporary) std::filesystem::remove_all(report_dir);
    return 128 + result.stopped_by;
  }
  if (result.exit_code != 0) {
    std::fprintf(stderr, "lens-train: failed: %s\n", result.message.c_str());
    return 1;
  }
  std::vector<RankReport> reports;
  for (int r = 0; r < launch.world_size; ++r)
    reports.push_back(read_report(report_dir + "/rank-" + std::to_string(r) + ".json"));
  std::fputs(summarize(reports, o.pp, o.dp, o.tp, o.microbatches).c_str(), stdout);
  if (temporary) std::filesystem::remove_all(report_dir);
  return 0;
}

}  // namespace
}  // namespace lens::train

int main(int argc, char** argv) {
  const lens::train::TrainOptions options = lens::train::parse_train_options(argc, argv);
  try {
    if (std::getenv("RANK") == nullptr) return lens::train::launch(options);
    return lens::train::run_rank(options);
  } catch (const std::exception& e) {
    const char* rank = std::getenv("RANK");
    std::fprintf(stderr, "lens-train: rank %s: error: %s\n", rank ? rank : "-", e.what());
    return 1;
  }
}
