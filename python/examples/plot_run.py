"""Plots a run's step time and each stage's waits per step with matplotlib,
from lens.analysis's DataFrames: what a notebook cell does, as a script.

    python3 plot_run.py lens-traces/<run-id> [-o run.png]

Top: step time per step, with the critical path's compute beneath it.
Bottom: per stage, the time its step spent waiting (for a neighbour's
send or receive, at the gradient sync, at the tensor-parallel
collectives) per step.
"""

import argparse

import matplotlib

matplotlib.use("Agg")  # a file, no display
import matplotlib.pyplot as plt

import lens.analysis as la


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("-o", "--output", default="run.png")
    args = parser.parse_args()

    run = la.analyze(args.run_dir, critical_path=False)
    waits = run.stage_steps.assign(
        waits_ms=lambda f: f.late_sender_ms + f.late_receiver_ms + f.sync_wait_ms +
        f.collective_wait_ms)
    # One line per stage (the mean over its replicas and tensor ranks).
    per_stage = waits.pivot_table(index="step", columns="stage", values="waits_ms",
                                  aggfunc="mean")

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    top.plot(run.steps.step, run.steps.step_ms, label="step")
    top.plot(run.steps.step, run.steps.critical_compute_ms, label="compute on the critical path")
    top.axhline(run.summary["step_p50_ms"], linestyle="--", color="grey", label="p50")
    top.set_ylabel("ms")
    top.legend()
    for stage in per_stage.columns:
        bottom.plot(per_stage.index, per_stage[stage], label=f"stage {stage}")
    bottom.set_xlabel("step")
    bottom.set_ylabel("waiting, ms")
    bottom.legend()
    for _, s in run.stragglers.iterrows():
        for ax in (top, bottom):
            ax.axvline(s.since_step, color="red", alpha=0.4)
    fig.suptitle(f"{args.run_dir}: {run!r}", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)
    print(f"wrote {args.output}: {len(run.steps)} steps, {per_stage.shape[1]} stages")


if __name__ == "__main__":
    main()
