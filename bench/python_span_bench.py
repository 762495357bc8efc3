#!/usr/bin/python3
"""Cost of lens.managed_span from Python, group on and off.

  PYTHONPATH=build/python /usr/bin/python3 bench/python_span_bench.py

Times `with lens.managed_span("x", group, **{"dl.microbatch_id": 3}): pass`
(with timeit, best of 7 repeats) in four states, next to two floors measured
in the same run: an empty `with` over a Python context manager, and a call
of an empty Python function with the same arguments. Spans that are
recorded go through the real batch processor to the `none` exporter (the
export thread discards them), so the figure is the cost on the training
thread.
"""

import contextlib
import timeit

import lens

N = 200_000
ATTRS = {"dl.microbatch_id": 3}


def best_ns(stmt, setup_globals):
    t = timeit.Timer(stmt, globals=setup_globals)
    return min(t.repeat(repeat=7, number=N)) / N * 1e9


def empty(name, group, **attributes):
    return None


def main():
    g = {"lens": lens, "contextlib": contextlib, "empty": empty, "ATTRS": ATTRS,
         "null": contextlib.nullcontext()}
    floor_with = best_ns("with null: pass", g)
    floor_call = best_ns('empty("x", "microbatch", **ATTRS)', g)
    stmt = 'with lens.managed_span("x", "microbatch", **ATTRS): pass'

    rows = [("empty with (contextlib.nullcontext)", floor_with),
            ("empty Python function call, same arguments", floor_call)]
    lens.init(enabled=False)
    rows.append(("managed_span, telemetry not initialised", best_ns(stmt, g)))
    lens.init(enabled=True, exporter="none", span_groups="per_step")
    rows.append(("managed_span, group off", best_ns(stmt, g)))
    lens.set_span_groups("per_step,microbatch")
    rows.append(("managed_span, group on (recorded)", best_ns(stmt, g)))
    stats = lens.get_telemetry().stats()
    lens.shutdown()

    width = max(len(r[0]) for r in rows)
    for label, ns in rows:
        print(f"{label:<{width}}  {ns:8.1f} ns   {ns / floor_call:5.2f}x call")
    print(f"recorded spans queued {stats['queued']}, dropped (queue full) {stats['dropped_queue_full']}")


if __name__ == "__main__":
    main()
