"""lens.otel under load: 8 threads start and end 20,000 spans each while the
main thread forks children (each starts a span and exits) and, part-way,
shuts the provider down. Prints one JSON line: the spans each thread saw
recording, the core's account after the shutdown, the children's exit
codes, and what raised (expected nothing).

    OTEL_PYTHON_TRACER_PROVIDER=lens LENS_TRACE_DIR=D MEGATRON_OTEL_RUN_ID=stress \\
        python otel_stress.py
"""

import json
import os
import threading
import time

from opentelemetry import trace

import lens
from lens import _lens

THREADS, SPANS = 8, 20_000


def main():
    tracer = trace.get_tracer("stress")
    with tracer.start_as_current_span("warm-up"):
        pass
    recorded = [0] * THREADS
    errors = []
    started = threading.Barrier(THREADS + 1)

    def work(i):
        started.wait()
        try:
            for n in range(SPANS):
                with tracer.start_as_current_span("megatron.microbatch.forward",
                                                  attributes={"n": n}) as span:
                    if span.is_recording():
                        span.set_attribute("thread", i)
                        recorded[i] += 1
        except Exception as error:  # noqa: BLE001 - what the test counts
            errors.append(repr(error))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    started.wait()
    children = []
    for k in range(6):
        time.sleep(0.05)
        pid = os.fork()
        if pid == 0:
            with tracer.start_as_current_span("child"):
                pass
            os._exit(0)
        children.append(pid)
        if k == 3:
            trace.get_tracer_provider().shutdown()  # during the load
    codes = []
    for pid in children:
        deadline = time.monotonic() + 30
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                codes.append(os.waitstatus_to_exitcode(status))
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                codes.append("hung")
                break
            time.sleep(0.01)
    for t in threads:
        t.join()
    stats = _lens.stats()
    print(json.dumps({"recorded": sum(recorded), "stats": stats, "children": codes,
                      "errors": errors, "initialized": lens.get_telemetry() is not None}))


if __name__ == "__main__":
    main()
