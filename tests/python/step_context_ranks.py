#!/usr/bin/python3
"""lens.distributed.broadcast_trace_context and step_trace_context, the call
shapes nemo-lens's helpers use, across 2 Gloo processes on 127.0.0.1: every
rank gets the source's step context each step (one broadcast, or derived
with no collective), the step checks run when due (LENS_STEP_VERIFY_STEPS),
and a rank at another step makes both ranks raise lens.StepCheckError,
with a failure record on each (an event on its open job span, a line on
its stderr).

  step_context_ranks.py            runs the cases (the test)
  step_context_ranks.py RANK MODE  one rank of one case (what the test starts)
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

WORLD, STEPS = 2, 6


def rank_main(rank, mode):
    import torch.distributed as dist

    import lens

    dist.init_process_group("gloo", rank=rank, world_size=WORLD, init_method="env://")
    lens.distributed.init(pipeline_parallel_size=WORLD)
    out = {"contexts": [], "error": None}
    job = lens.distributed.job_span(rank)  # open through the steps: a failure is recorded on it
    try:
        for step in range(STEPS):
            # In the "apart" case rank 1 counts its steps from 1: the check
            # after the second step finds the ranks at different steps.
            told = step + 1 if mode == "apart" and rank == 1 else step
            if mode == "broadcast":
                carrier = lens.distributed.broadcast_trace_context(rank=rank, src_rank=0)
            else:
                carrier = lens.distributed.step_trace_context(told, rank, src_rank=0)
            out["contexts"].append(None if carrier is None else
                                   [carrier.trace_id, carrier.span_id, carrier.step])
    except lens.StepCheckError as error:
        out["error"] = str(error)
    job.end()
    out["stats"] = lens._lens.pipeline_stats()
    lens.shutdown()
    dist.destroy_process_group()
    print(json.dumps(out), flush=True)
    return 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StepContextAcrossRanks(unittest.TestCase):
    def run_case(self, mode, **env):
        trace_dir = tempfile.mkdtemp(prefix="lens-py-step-context-")
        base = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                    WORLD_SIZE=str(WORLD), LENS_TRACE_DIR=trace_dir, MEGATRON_OTEL_ENABLED="1",
                    MEGATRON_OTEL_SPAN_GROUPS="all", LENS_STEP_VERIFY_STEPS="2",
                    LENS_COLLECTIVE_TIMEOUT_MS="60000", **env)
        procs = [subprocess.Popen([sys.executable, __file__, str(r), mode],
                                  env=dict(base, RANK=str(r)), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in range(WORLD)]
        outs = []
        for p in procs:
            stdout, stderr = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, stderr[-3000:])
            outs.append(json.loads(stdout.strip().splitlines()[-1]))
            outs[-1]["stderr"] = stderr
        return outs, trace_dir

    def failure_records(self, trace_dir):
        found = 0
        for root, _, files in os.walk(trace_dir):
            for name in files:
                with open(os.path.join(root, name), errors="replace") as f:
                    found += f.read().count("lens.failure")
        return found

    def test_broadcast_gives_every_rank_the_sources_context(self):
        outs, _ = self.run_case("broadcast")
        self.assertEqual(len(outs[0]["contexts"]), STEPS)
        self.assertEqual(outs[0]["contexts"], outs[1]["contexts"])
        self.assertEqual([c[2] for c in outs[0]["contexts"]], list(range(STEPS)))
        self.assertEqual(len({c[0] for c in outs[0]["contexts"]}), STEPS, "a trace a step")
        for o in outs:
            self.assertEqual(o["stats"]["broadcasts"], STEPS)
            self.assertIsNone(o["error"])

    def test_derived_contexts_agree_and_are_checked_every_two_steps(self):
        outs, _ = self.run_case("derived", LENS_STEP_CONTEXT="derived")
        self.assertEqual(outs[0]["contexts"], outs[1]["contexts"])
        self.assertEqual(len({c[0] for c in outs[0]["contexts"]}), STEPS)
        for o in outs:
            self.assertEqual(o["stats"]["broadcasts"], 0)
            self.assertEqual(o["stats"]["derived_steps"], STEPS)
            self.assertGreaterEqual(o["stats"]["step_checks"], STEPS // 2)
            self.assertIsNone(o["error"])

    def test_a_rank_at_another_step_fails_every_rank_with_a_record(self):
        outs, trace_dir = self.run_case("apart", LENS_STEP_CONTEXT="derived")
        for o in outs:
            self.assertIsNotNone(o["error"], o)
            self.assertLess(len(o["contexts"]), STEPS)
        self.assertIn("step", outs[0]["error"])
        # The record: an event on each rank's open job span, and a line on
        # its stderr naming the span it was in.
        self.assertEqual(self.failure_records(trace_dir), WORLD)
        for rank, o in enumerate(outs):
            self.assertIn(f"lens: rank {rank} was in: megatron.job", o["stderr"])


if __name__ == "__main__":
    if len(sys.argv) == 3:
        sys.exit(rank_main(int(sys.argv[1]), sys.argv[2]))
    unittest.main(argv=sys.argv[:1], verbosity=2)
