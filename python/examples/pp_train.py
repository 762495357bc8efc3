#!/usr/bin/python3
"""A small pipeline-parallel training loop on torch.distributed, traced by lens.

Each of P processes holds one stage (two Linear layers) of a regression
model and runs Megatron's non-interleaved 1F1B schedule over M microbatches
per step: activations go forward and gradients backward with
torch.distributed isend/recv (Gloo, on 127.0.0.1). The lens integration is
the reference page's, in a few lines:

  * at start-up: lens.distributed.init (every rank checks that all have the
    same lens settings, and takes rank 0's run id);
  * around the training loop: lens.distributed.job_span (every rank's
    megatron.job in the job's one trace; each step span links to it);
  * before each step span: broadcast_trace_context from rank 0 (through
    step_trace_context, which with LENS_STEP_CONTEXT=derived derives the
    context instead, with no collective per step), then
    set_pp_trace_carrier (gated on get_telemetry() is not None and P > 1,
    the same on every rank);
  * around the warmup and pre-1F1B recv_forward of non-first stages: a
    create_linked_span to the carrier.

  pp_train.py --world 4 --steps 5 --microbatches 6 --trace-dir DIR
starts the P ranks itself (as torchrun would) and waits for them; telemetry
is configured by the usual variables (MEGATRON_OTEL_ENABLED=1, ...) or, for
convenience, by --trace-dir (file export of the per_step,microbatch groups).
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

P2P_TAG_FORWARD = 1
P2P_TAG_BACKWARD = 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trace_environment(args, run_id):
    """--trace-dir as telemetry settings to set where the environment has
    none: file export of the per_step and microbatch groups, into one run
    directory."""
    if not args.trace_dir:
        return {}
    env = {"MEGATRON_OTEL_ENABLED": "1", "MEGATRON_OTEL_EXPORTER": "file",
           "MEGATRON_OTEL_SPAN_GROUPS": "per_step,microbatch"}
    if run_id:
        env["MEGATRON_OTEL_RUN_ID"] = run_id  # one run directory for all ranks
    return env


def launch(args):
    """Starts the ranks as torchrun does and returns the worst exit code."""
    port = free_port()
    run_id = time.strftime("%Y%m%d-%H%M%S-py", time.gmtime()) + f"{os.getpid() % 100000:05d}"
    procs = []
    for rank in range(args.world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.world), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), PP_TRAIN_RANK_PROCESS="1")
        for key, value in trace_environment(args, run_id).items():
            env.setdefault(key, value)
        if args.trace_dir:
            env["LENS_TRACE_DIR"] = args.trace_dir
        for spec in args.rank_env:
            at, _, assignment = spec.partition(":")
            if at == str(rank):
                key, _, value = assignment.partition("=")
                env[key] = value
        # Each rank in a session of its own: a terminal's Ctrl-C reaches the
        # launcher only, which passes it on once.
        procs.append(subprocess.Popen([sys.executable, __file__] + sys.argv[1:], env=env,
                                      start_new_session=True))
    # SIGTERM (preemption) or SIGINT to the launcher goes to every rank, as
    # torchrun's agent passes it on; the ranks finish their step and stop.
    stopped_by = []

    def forward(signo, frame):
        stopped_by.append(signo)
        for q in procs:
            if q.poll() is None:
                q.send_signal(signo)

    for signo in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signo, forward)
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=args.timeout))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            print(f"pp_train: ranks did not finish within {args.timeout} s", file=sys.stderr)
            return 3
    if stopped_by:
        name = signal.Signals(stopped_by[0]).name
        print(f"pp_train: stopped by {name}; rank exit statuses {codes}", file=sys.stderr,
              flush=True)
        return 128 + stopped_by[0]
    return max(abs(c) for c in codes)


def schedule_1f1b(stage, stages, microbatches):
    """Megatron's non-interleaved 1F1B order: ("F", i) and ("B", i) items,
    with warmup forwards marked as such."""
    warmup = min(stages - stage - 1, microbatches)
    order = [("F", i, "warmup") for i in range(warmup)]
    remaining = microbatches - warmup
    for j in range(remaining):
        order.append(("F", warmup + j, "pre-1f1b" if j == 0 else "steady"))
        order.append(("B", j, "steady"))
    for j in range(remaining, microbatches):
        order.append(("B", j, "cooldown"))
    return order


def p2p_attributes(direction, peer, sent=None, received=None):
    """What a transfer span carries, as lens-train's (docs/analysis.md)."""
    attributes = {"dl.p2p.direction": direction, "dl.pipeline_parallel.peer_rank": peer}
    if sent is not None:
        attributes["dl.microbatch_id.sent"] = sent
    if received is not None:
        attributes["dl.microbatch_id.received"] = received
    attributes["dl.microbatch_id"] = sent if sent is not None else received
    return attributes


def run_rank(args):
    import torch
    import torch.distributed as dist

    import lens

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    # MASTER_ADDR and MASTER_PORT as the launcher (this script or torchrun)
    # set them; under torchrun's agent the store is the agent's
    # (TORCHELASTIC_USE_AGENT_STORE), which env:// joins as a client.
    dist.init_process_group("gloo", rank=rank, world_size=world, init_method="env://")
    stage, stages = rank, world  # one pipeline: PP = world
    try:
        skew = {}
        if args.test_clock_offsets_us:  # TEST AID: a skewed span clock per rank
            skew["test_clock_offset_us"] = float(args.test_clock_offsets_us.split(",")[rank])
        if args.test_clock_drift_ppm:
            skew["test_clock_drift_ppm"] = float(args.test_clock_drift_ppm.split(",")[rank])
        lens.distributed.init(pipeline_parallel_size=stages, **skew)  # the start-up check: same settings on every rank
    except lens.ConfigError as error:
        print(f"pp_train: rank {rank}: {error}", file=sys.stderr, flush=True)
        return 2

    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"pp_train: rank {rank}: --device cuda, but torch sees no CUDA device", file=sys.stderr, flush=True)
        return 2
    device = torch.device(args.device)
    # On a GPU the compute and the copies are timed on the device: the spans
    # below name the stream their work is launched on (docs/device-time.md).
    stream = torch.cuda.current_stream() if args.device == "cuda" else None
    torch.manual_seed(1234 + stage)
    hidden = args.hidden
    model = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
                                torch.nn.Linear(hidden, hidden)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    data = torch.Generator().manual_seed(99)
    target_map = (torch.randn(hidden, hidden, generator=data) / hidden ** 0.5).to(device)
    dataset = [torch.randn(args.batch, hidden, generator=data).to(device) for _ in range(args.microbatches)]

    # Gloo moves host tensors: on a GPU an activation goes through the host
    # (the copy to the host waits for the device; the copy back is queued).
    def to_wire(t):
        return t.detach().cpu() if stream is not None else t.detach()

    def from_wire(t):
        return t.to(device, non_blocking=True) if stream is not None else t

    # Live metrics and stragglers (docs/metrics.md): the spans time this
    # rank's step figures (compute, pipeline waits and sends, optimizer),
    # recorded or not; they go to histograms on an OpenMetrics endpoint and,
    # with OTEL_METRICS_EXPORTER=otlp, to /v1/metrics (their exemplars the
    # sampled steps' spans); and every --live-every steps one all-gather of
    # each rank's median compute, judged alike by every rank.
    registry = lens.MetricRegistry()
    step_metrics = lens.StepMetrics(registry, [("rank", str(rank)), ("stage", str(stage))])
    exporter = lens.metrics_exporter_from_environment(registry)
    lens.set_step_figures(args.metrics_port >= 0 or args.live_every > 0 or exporter is not None)
    endpoint = None
    if args.metrics_port >= 0:
        endpoint = lens.MetricsEndpoint(registry, "127.0.0.1",
                                        0 if args.metrics_port == 0 else args.metrics_port + rank)
        print(f"pp_train: rank {rank}: metrics at http://127.0.0.1:{endpoint.port}/metrics",
              file=sys.stderr, flush=True)
    # Tail selection (docs/tail-selection.md; LENS_TAIL_SELECTION, agreed at
    # start-up): each step held, and at each meeting (--live-every, else
    # every 10 steps) every rank's step times gathered in the same
    # all-gather, the same steps kept on every rank. Both are lens's step
    # meeting, the one lens-train runs.
    meeting = lens.distributed.StepMeeting(live_every=args.live_every,
                                           ranks=[(r, r, 0, 0) for r in range(world)],
                                           who=f"pp_train: rank {rank}")
    if rank == 0 and meeting.hold_warning():
        print(f"pp_train: {meeting.hold_warning()}", file=sys.stderr, flush=True)
    slow_rank, slow_factor, slow_from = -1, 1.0, 0
    if args.test_slow_rank:  # TEST AID: RANK:FACTOR:FROM_STEP
        slow_rank, slow_factor, slow_from = args.test_slow_rank.split(":")
        slow_rank, slow_factor, slow_from = int(slow_rank), float(slow_factor), int(slow_from)
    # TEST AID: only these steps slowed (a test then knows which are slow).
    slow_steps = {int(s) for s in args.test_slow_steps.split(",")} if args.test_slow_steps else set()

    def met(verdict):
        """What a meeting found, said by rank 0 (the step span has its events)."""
        for named in verdict["stragglers"] if rank == 0 else ():
            print(f"pp_train: live: {named['line']}", file=sys.stderr, flush=True)

    def computed(started, step):
        """A forward or backward that began at `started` is done: slowed by the aid."""
        took = time.perf_counter() - started
        slowed = step in slow_steps if slow_steps else step >= slow_from
        if rank == slow_rank and slowed and slow_factor > 1:
            time.sleep((slow_factor - 1) * took)
    first, last = stage == 0, stage == stages - 1
    losses = []

    # The step protocol (lens's, over torch.distributed): every rank's step
    # in one trace, its receives linked to the source's step span, clock
    # samples and step checks as the settings say.
    trace = lens.distributed.StepTrace(pipeline_parallel_size=stages)
    # One job trace: every rank's megatron.job span in it; each step span
    # links to its rank's (a no-op span without telemetry).
    job = lens.distributed.job_span(rank, **{"dl.pipeline_parallel.size": stages,
                                             "dl.num_microbatches": args.microbatches})
    trace.set_job_span(job)
    # Preemption (SIGTERM) and Ctrl-C (SIGINT, given back its default
    # action first so that the watch owns it): each rank finishes its step,
    # ends what is open (truncated), flushes, says why, and exits 128 + the
    # signal. A second signal ends it at once.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    lens.watch_termination(then="continue")
    completed = 0
    peer_note = ""
    try:
        for step in range(args.steps):
            if lens.termination_signal():  # between steps: a clean stop
                break
            step_started = time.perf_counter()
            lens.take_step_figures()  # from here on, this step's
            numbered = step + (1 if rank == args.test_step_skew_rank else 0)  # TEST AID
            # The reference page's broadcast (with LENS_STEP_CONTEXT=derived:
            # derived, no collective per step), a clock sample when one is
            # due (docs/clock-alignment.md), then the step span.
            with trace.step(numbered) as step_span:
                step_span.set_attribute("dl.pipeline_parallel.size", stages)
                step_span.set_attribute("dl.num_microbatches", args.microbatches)
                if meeting.tail_selection and step_span.recording:
                    lens.hold_step(step, step_span.context)
                inputs = dataset  # the same microbatches every step: the loss goes down
                saved = {}
                pending_sends = []  # isend: a stage never blocks on its sends, as Megatron's batched p2p
                step_loss = 0.0
                optimizer.zero_grad()
                # The schedule nests in forward_backward, as Megatron's does.
                with lens.managed_span("megatron.forward_backward", group="forward_backward",
                                       **{"dl.num_microbatches": args.microbatches}):
                    for kind, mb, phase in schedule_1f1b(stage, stages, args.microbatches):
                        if kind == "F":
                            if first:
                                x = inputs[mb]
                            else:
                                x = torch.empty(args.batch, hidden)
                                link = None
                                if phase in ("warmup", "pre-1f1b"):
                                    link = trace.recv_forward_linked(mb)
                                with lens.managed_span("megatron.p2p.recv_forward", group="communication",
                                                       figure="p2p_wait",
                                                       stream=stream,
                                                       **p2p_attributes("forward", stage - 1, received=mb)):
                                    dist.recv(x, src=rank - 1, tag=P2P_TAG_FORWARD)
                                    x = from_wire(x)
                                if link is not None:
                                    link.end()
                                x.requires_grad_(True)
                            started = time.perf_counter()  # the aid slows the span as a whole
                            with lens.managed_span("megatron.microbatch.forward", group="microbatch",
                                                   stream=stream, **{"dl.microbatch_id": mb}):
                                y = model(x)
                                if last:
                                    loss = torch.nn.functional.mse_loss(y, inputs[mb] @ target_map)
                                    step_loss += loss.item() / args.microbatches
                                    saved[mb] = (x, loss / args.microbatches)
                                else:
                                    saved[mb] = (x, y)
                                computed(started, step)
                            if not last:
                                with lens.managed_span("megatron.p2p.send_forward", group="communication",
                                                       figure="p2p_send",
                                                       stream=stream,
                                                       **p2p_attributes("forward", stage + 1, sent=mb)):
                                    pending_sends.append(dist.isend(to_wire(y), dst=rank + 1, tag=P2P_TAG_FORWARD))
                        else:
                            x, out = saved.pop(mb)
                            grad = None
                            if not last:
                                grad = torch.empty(out.shape)
                                with lens.managed_span("megatron.p2p.recv_backward", group="communication",
                                                       figure="p2p_wait",
                                                       stream=stream,
                                                       **p2p_attributes("backward", stage + 1, received=mb)):
                                    dist.recv(grad, src=rank + 1, tag=P2P_TAG_BACKWARD)
                                    grad = from_wire(grad)
                            started = time.perf_counter()  # the aid slows the span as a whole
                            with lens.managed_span("megatron.microbatch.backward", group="microbatch",
                                                   stream=stream, **{"dl.microbatch_id": mb}):
                                if last:
                                    out.backward()
                                else:
                                    out.backward(grad)
                                computed(started, step)
                            if not first:
                                with lens.managed_span("megatron.p2p.send_backward", group="communication",
                                                       figure="p2p_send",
                                                       stream=stream,
                                                       **p2p_attributes("backward", stage - 1, sent=mb)):
                                    pending_sends.append(dist.isend(to_wire(x.grad), dst=rank - 1, tag=P2P_TAG_BACKWARD))
                    for work in pending_sends:
                        work.wait()
                with lens.managed_span("megatron.optimizer.step", group="optimizer"):
                    optimizer.step()
                measured = lens.take_step_figures()
                if meeting.step_done(step, measured["compute"]["seconds"] * 1e3,
                                     time.perf_counter() - step_started):
                    met(meeting.meet(step, step_span))
                if last:
                    losses.append(step_loss)
            # The step span's context, kept after it ended (None: not recorded).
            step_metrics.record_step(time.perf_counter() - step_started, measured, step_span.context)
            completed += 1
    except lens.StepCheckError as error:  # every rank raises it alike
        print(f"pp_train: rank {rank}: {error}", file=sys.stderr, flush=True)
        job.end()
        lens.shutdown()
        return 1
    except RuntimeError as error:  # a peer that stopped first: this rank's transfer fails
        if not lens.termination_signal():
            raise
        peer_note = f"; a peer stopped first ({str(error).splitlines()[0]})"
    if lens.termination_signal():
        name = lens._lens.signal_name(lens.termination_signal())
        when = f"after step {completed - 1}" if completed else "before its first step"
        lens.shutdown()
        print(f"pp_train: rank {rank}: stopped by {name} {when} ({completed} steps done){peer_note}",
              file=sys.stderr, flush=True)
        return 128 + lens.termination_signal()

    if last:
        print(f"pp_train: rank {rank}: loss {losses[0]:.4f} -> {losses[-1]:.4f} over {args.steps} steps",
              flush=True)
        if not all(l == l for l in losses):  # NaN check
            print("pp_train: the loss is not a number", file=sys.stderr)
            return 1
    meeting.finish(args.steps - 1)  # the last, partial window (every rank ran the same steps)
    trace.finish()  # the closing clock sample, on every rank
    job.end()
    stats = lens.distributed._lens.pipeline_stats()
    dist.barrier()
    lens.shutdown()
    dist.destroy_process_group()
    if exporter is not None:
        exporter.shutdown()  # the totals at the end
    if endpoint is not None:
        time.sleep(args.metrics_linger)  # a last scrape or two
        endpoint.stop()
    print(f"pp_train: rank {rank}: {stats['broadcasts']} broadcasts, "
          f"{stats['derived_steps']} derived step contexts, {stats['step_checks']} step checks, "
          f"{stats['linked_spans']} linked spans", flush=True)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=4, help="processes = pipeline stages")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--microbatches", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the model runs; cuda times compute and copies on the GPU")
    parser.add_argument("--metrics-port", type=int, default=-1,
                        help="serve live metrics: rank r on 127.0.0.1:PORT+r (0: picked, printed)")
    parser.add_argument("--metrics-linger", type=float, default=0.0,
                        help="seconds to keep serving metrics after the last step")
    parser.add_argument("--live-every", type=int, default=0,
                        help="every N steps the ranks gather their compute; rank 0 names stragglers")
    parser.add_argument("--test-slow-rank", default="", metavar="RANK:FACTOR:FROM_STEP",
                        help="TEST AID: that rank computes FACTOR times as long from FROM_STEP on")
    parser.add_argument("--test-slow-steps", default="",
                        help="TEST AID: with --test-slow-rank, only these steps (a comma list) are slowed")
    parser.add_argument("--trace-dir", default="")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds the launcher waits")
    parser.add_argument("--rank-env", action="append", default=[], metavar="RANK:NAME=VALUE",
                        help="an environment variable for one rank only (to try mismatched settings)")
    parser.add_argument("--test-clock-offsets-us", default="", metavar="A,B,...",
                        help="TEST AID: one span clock offset per rank, in µs")
    parser.add_argument("--test-clock-drift-ppm", default="", metavar="A,B,...",
                        help="TEST AID: one span clock drift per rank, in ppm")
    parser.add_argument("--test-step-skew-rank", type=int, default=-1, metavar="RANK",
                        help="TEST AID: this rank numbers its steps one higher than the others")
    args = parser.parse_args()
    for name in ("test_clock_offsets_us", "test_clock_drift_ppm"):
        values = getattr(args, name)
        if values and len(values.split(",")) != args.world:
            parser.error(f"--{name.replace('_', '-')} takes one value per rank ({args.world})")
    if args.world < 1 or args.steps < 1 or args.microbatches < 1:
        parser.error("--world, --steps and --microbatches must be at least 1")
    for spec in args.rank_env:
        at, sep, assignment = spec.partition(":")
        if not sep or not at.isdigit() or "=" not in assignment:
            parser.error(f"--rank-env takes RANK:NAME=VALUE, not {spec!r}")
    if os.environ.get("PP_TRAIN_RANK_PROCESS") == "1":
        return run_rank(args)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        # Started by a launcher (torchrun --nproc_per_node P pp_train.py):
        # this process is one rank; --world is the launcher's world size.
        args.world = int(os.environ["WORLD_SIZE"])
        for key, value in trace_environment(args, os.environ.get("TORCHELASTIC_RUN_ID")).items():
            os.environ.setdefault(key, value)
        if args.trace_dir:
            os.environ["LENS_TRACE_DIR"] = args.trace_dir
        return run_rank(args)
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
