"""What the tests' multi-process pipelines share: a launch of their ranks as
torchrun does (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, each
rank a process running the same script), and the 1F1B order of a stage's
forwards and backwards."""

import os
import socket
import subprocess
import sys


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(script, world, timeout, rank_env):
    """Runs `script` with this process's arguments once a rank, `rank_env(rank)`
    added to each rank's environment; returns the largest exit status (3
    when a rank did not finish within `timeout` seconds: every rank killed)."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **rank_env(rank))
        procs.append(subprocess.Popen([sys.executable, script] + sys.argv[1:], env=env))
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            print(f"{os.path.basename(script)}: ranks did not finish in time", file=sys.stderr)
            return 3
    return max(abs(c) for c in codes)


def schedule_1f1b(stage, stages, microbatches):
    """A stage's computes in 1F1B order: ("F" or "B", microbatch)."""
    warmup = min(stages - stage - 1, microbatches)
    order = [("F", i) for i in range(warmup)]
    for j in range(microbatches - warmup):
        order += [("F", warmup + j), ("B", j)]
    order += [("B", j) for j in range(microbatches - warmup, microbatches)]
    return order


HIDDEN, BATCH = 32, 8  # a stage's layer width and a microbatch's rows


def stage_model(stage, microbatches):
    """A stage's model (a linear layer and a tanh), its SGD optimizer and its
    microbatches' inputs, the same for every run of a stage."""
    import torch

    torch.manual_seed(7 + stage)
    model = torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs = [torch.randn(BATCH, HIDDEN) for _ in range(microbatches)]
    return model, optimizer, inputs
