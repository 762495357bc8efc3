"""Megatron's spans through lens.otel in a process that uses CUDA: the
simulated CUDA runtime (tests/device/simulated_cuda_runtime.cc) named in
LENS_CUDA_RUNTIME, and torch.cuda's state as a CUDA process has it (the
argument "cuda": initialised, the current stream a handle of the simulated
runtime's) or as torch without a GPU leaves it ("host"). The device runs
200 ms behind the host (so that every span's start is queued behind work,
and its device times are exact, whatever the host's pauses under load);
the forward's work takes 4 ms of it, the backward's 6 ms, a layer's 1 ms
and another span's 2 ms."""

import ctypes
import os
import sys

import torch

STREAM = 0x71
sim = ctypes.CDLL(os.environ["LENS_CUDA_RUNTIME"])
sim.lens_sim_reset(ctypes.c_int64(0), ctypes.c_double(0))


class _Stream:
    cuda_stream = STREAM


if sys.argv[1] == "cuda":
    torch.cuda.is_initialized = lambda: True
    torch.cuda.current_stream = lambda device=None: _Stream()


def launch(ns):
    sim.lens_sim_launch(ctypes.c_void_p(STREAM), ctypes.c_int64(ns))


from opentelemetry import trace  # noqa: E402

t = trace.get_tracer("megatron")
with t.start_as_current_span("megatron.train.iteration", attributes={"megatron.iteration": 0}):
    with t.start_as_current_span("megatron.train.iteration.forward_backward"):
        launch(200_000_000)
        with t.start_as_current_span("megatron.microbatch.forward"):  # the C start
            launch(4_000_000)
        with t.start_as_current_span("megatron.p2p.send_forward"):
            pass
        backward = t.start_span("megatron.microbatch.backward")  # the general start
        launch(6_000_000)
        backward.end()
        with t.start_as_current_span("megatron.layer.attention"):
            launch(1_000_000)
        with t.start_as_current_span("megatron.other"):
            launch(2_000_000)
trace.get_tracer_provider().shutdown()
