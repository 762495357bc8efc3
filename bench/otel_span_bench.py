#!/usr/bin/env python3
"""Cost of a span through the OpenTelemetry Python API: lens's provider
against the OTel SDK, the API's own no-op default and lens.managed_span.

  PYTHONPATH=build/python .venv/bin/python bench/otel_span_bench.py

Each case runs in a process of its own (the API takes one global provider a
process) and times, with timeit (best of 7 repeats of N spans),

    with tracer.start_as_current_span("megatron.microbatch.forward",
                                      attributes={"dl.microbatch_id": 3}): pass

(lens.managed_span: its own call with the same attribute). Recorded spans go
to an exporter that drops them, off the training thread: lens's `none`
exporter behind its batch processor; the SDK's BatchSpanProcessor with an
exporter whose export returns SUCCESS. So the figure is the cost on the
calling thread. All figures come from one run and are compared as ratios.
"""

import json
import os
import subprocess
import sys
import timeit

N = 50_000
STMT = ('with tracer.start_as_current_span("megatron.microbatch.forward", '
        'attributes=ATTRS): pass')

CASES = {
    "noop": "the API's no-op default (no provider)",
    "sdk": "OTel SDK 1.45, BatchSpanProcessor, exporter that drops",
    "lens_otel": "lens.otel provider (recorded, `none` exporter)",
    "lens_otel_step": "lens.otel, inside a megatron.train.iteration (ids and peers added)",
    "lens_managed_span": "lens.managed_span (recorded, `none` exporter)",
}


def measure(case):
    globals_ = {"ATTRS": {"dl.microbatch_id": 3}}
    stmt = STMT
    if case == "sdk":
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (BatchSpanProcessor, SpanExporter,
                                                    SpanExportResult)

        class Drop(SpanExporter):
            def export(self, spans):
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Drop()))
        trace.set_tracer_provider(provider)
        globals_["tracer"] = trace.get_tracer("bench")
    elif case == "noop":
        from opentelemetry import trace

        globals_["tracer"] = trace.get_tracer("bench")
    else:
        import lens

        lens.init(enabled=True, exporter="none", span_groups="all", step_context="derived")
        if case.startswith("lens_otel"):
            import lens.otel
            from opentelemetry import trace

            lens.otel.install()
            tracer = globals_["tracer"] = trace.get_tracer("bench")
            with tracer.start_as_current_span("bench.setup"):
                pass  # the provider's set-up, at its first span
            if case == "lens_otel_step":
                # Every span below inside one open step, as a training
                # loop's are (the step's counters grow; nothing else does).
                tracer.start_as_current_span(
                    "megatron.train.iteration", attributes={"megatron.iteration": 0}).__enter__()
        else:
            globals_["lens"] = lens
            stmt = 'with lens.managed_span("megatron.microbatch.forward", "microbatch", **ATTRS): pass'
    timer = timeit.Timer(stmt, globals=globals_)
    ns = min(timer.repeat(repeat=7, number=N)) / N * 1e9
    if case.startswith("lens"):
        import lens

        stats = lens.get_telemetry().stats()
        lens.shutdown()
        return {"ns": ns, "dropped": stats["dropped_queue_full"]}
    return {"ns": ns}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        print(json.dumps(measure(sys.argv[2])))
        return
    results = {}
    for case in CASES:
        env = {k: v for k, v in os.environ.items() if k != "OTEL_PYTHON_TRACER_PROVIDER"}
        out = subprocess.run([sys.executable, __file__, "--case", case], env=env, check=True,
                             capture_output=True, text=True).stdout
        results[case] = json.loads(out.strip().splitlines()[-1])
    width = max(len(v) for v in CASES.values())
    lens_ns = results["lens_otel"]["ns"]
    for case, label in CASES.items():
        r = results[case]
        extra = f", dropped {r['dropped']}" if "dropped" in r else ""
        print(f"{label:<{width}}  {r['ns']:8.0f} ns a span  {r['ns'] / lens_ns:5.2f}x lens.otel{extra}")
    print(f"lens.otel against the SDK: {results['sdk']['ns'] / lens_ns:.1f}x cheaper; "
          f"against the no-op API: {lens_ns / results['noop']['ns']:.2f}x its cost")


if __name__ == "__main__":
    main()
