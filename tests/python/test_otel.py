"""lens.otel, the OpenTelemetry Python API provider, and lens.nemo, against
the real opentelemetry-api (the project's venv, python/requirements.txt).

The contract: what the API's users and its own helpers (get_current_span,
use_span, the W3C propagator, NonRecordingSpan) rely on, each span read
back from the file lens exported. Then Megatron-LM's upstream
instrumentation, unchanged, in a 4-process Gloo 1F1B pipeline: correlated
under OTEL_PYTHON_TRACER_PROVIDER=lens (lens check passes, lens analyze
names the slowed stage), separate traces per rank under the OTel SDK.

Run with the venv's python; LENS_BIN names the lens command.
"""

import asyncio
import gc
import glob
import json
import re
import os
import subprocess
import sys
import tempfile
import unittest

from opentelemetry import context, propagate, trace
from opentelemetry.trace import (Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode,
                                 TraceFlags)

import lens
import lens.otel
import nemo_lens_wheel
from lens import nemo

HERE = os.path.dirname(os.path.abspath(__file__))
LAYOUT_RUN = os.path.join(HERE, "megatron_layout_run.py")
PIPELINE = os.path.join(HERE, "otel_pipeline.py")
NEMO_LENS_PIPELINE = os.path.join(HERE, "nemo_lens_pipeline.py")


def read_spans(path):
    """name -> [span dicts] of an OTLP/JSON lines file, attributes as a dict."""
    spans = {}
    with open(path) as f:
        for line in f:
            for rs in json.loads(line)["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    for s in ss["spans"]:
                        s["attrs"] = {a["key"]: next(iter(a["value"].values()))
                                      for a in s.get("attributes", [])}
                        spans.setdefault(s["name"], []).append(s)
    return spans


class Contract(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="lens-otel-")
        lens.init(enabled=True, span_groups="all", exporter="file", trace_dir=cls.tmp.name,
                  trace_file="spans.jsonl", run_id="contract", step_context="derived")
        cls.file = os.path.join(cls.tmp.name, "contract", "spans.jsonl")
        cls.provider = lens.otel.install()
        cls.tracer = trace.get_tracer("contract", "1.0")

    @classmethod
    def tearDownClass(cls):
        lens.shutdown()
        cls.tmp.cleanup()

    def exported(self):
        lens.flush()
        return read_spans(self.file)

    def test_the_global_provider_is_lens_and_get_tracer_takes_positional_and_keyword_arguments(self):
        self.assertIs(trace.get_tracer_provider(), self.provider)
        self.assertIsInstance(self.provider, trace.TracerProvider)
        a = self.provider.get_tracer("m", "1.2", "https://schema", {"k": "v"})
        b = self.provider.get_tracer(instrumenting_module_name="m",
                                     instrumenting_library_version="1.2", schema_url="https://schema")
        self.assertIsInstance(a, trace.Tracer)
        self.assertIs(a, b)
        self.assertIs(lens.otel.install(), self.provider, "installing twice keeps the one")

    def test_spans_are_api_spans_current_through_the_api_context(self):
        with self.tracer.start_as_current_span("contract.outer") as outer:
            self.assertIsInstance(outer, trace.Span)
            self.assertIs(trace.get_current_span(), outer)
            ctx = outer.get_span_context()
            self.assertIs(type(ctx), SpanContext, "the API's own SpanContext")
            self.assertTrue(ctx.is_valid and ctx.trace_flags.sampled and not ctx.is_remote)
            with self.tracer.start_as_current_span("contract.inner") as inner:
                self.assertIs(trace.get_current_span(), inner)
                self.assertEqual(inner.get_span_context().trace_id, ctx.trace_id)
            self.assertIs(trace.get_current_span(), outer)
            self.assertTrue(outer.is_recording())
        self.assertFalse(outer.is_recording())
        self.assertFalse(trace.get_current_span().get_span_context().is_valid)
        spans = self.exported()
        inner_row = spans["contract.inner"][-1]
        self.assertEqual(inner_row["parentSpanId"], format(ctx.span_id, "016x"))
        self.assertEqual(inner_row["traceId"], format(ctx.trace_id, "032x"))

    def test_the_common_start_in_c_and_the_general_one_record_the_same_span(self):
        # start_as_current_span under a lens span, no links or times: the
        # C path; with a link: start_span. Both spans read back alike.
        target = self.tracer.start_span("contract.target")
        with self.tracer.start_as_current_span("contract.paths") as parent:
            fast = self.tracer.start_as_current_span("contract.fast", attributes={"n": 1})
            with fast as a:
                self.assertIs(trace.get_current_span(), a)
            general = self.tracer.start_as_current_span(
                "contract.general", attributes={"n": 1},
                links=[Link(target.get_span_context())])
            with general as b:
                self.assertIs(trace.get_current_span(), b)
            self.assertIs(trace.get_current_span(), parent)
        target.end()
        self.assertTrue(fast._fast_entered)
        self.assertFalse(general._fast_entered)
        self.assertFalse(a.is_recording())
        spans = self.exported()
        for name in ("contract.fast", "contract.general"):
            row = spans[name][-1]
            self.assertEqual(row["parentSpanId"], format(parent.get_span_context().span_id, "016x"))
            self.assertEqual(row["attrs"], {"n": "1"})

    def test_start_span_with_a_context_kind_links_and_times(self):
        parent = self.tracer.start_span("contract.parent")
        linked_to = self.tracer.start_span("contract.link_target")
        span = self.tracer.start_span(
            "contract.child", context=trace.set_span_in_context(parent), kind=SpanKind.CLIENT,
            attributes={"a": 1}, links=[Link(linked_to.get_span_context(), {"why": "test"})],
            start_time=1_700_000_000_000_000_000)
        self.assertIsNot(trace.get_current_span(), span, "start_span does not make it current")
        span.end(end_time=1_700_000_000_250_000_000)
        for s in (parent, linked_to):
            s.end()
        row = self.exported()["contract.child"][-1]
        self.assertEqual(row["parentSpanId"], format(parent.get_span_context().span_id, "016x"))
        self.assertEqual(row["kind"], 3)  # OTLP CLIENT
        self.assertEqual(row["startTimeUnixNano"], "1700000000000000000")
        self.assertEqual(row["endTimeUnixNano"], "1700000000250000000")
        self.assertEqual(row["links"][0]["spanId"], format(linked_to.get_span_context().span_id, "016x"))
        self.assertEqual(row["links"][0]["attributes"][0]["key"], "why")

    def test_every_attribute_type_events_links_name_and_status_reach_the_record(self):
        other = self.tracer.start_span("contract.other")
        with self.tracer.start_as_current_span("contract.before") as span:
            span.set_attribute("s", "text")
            span.set_attribute("b", True)
            span.set_attribute("i", 42)
            span.set_attribute("f", 2.5)
            span.set_attributes({"ls": ["x", "y"], "lb": [True, False], "li": [1, 2],
                                 "lf": [0.5, 1.5]})
            span.add_event("checkpoint", {"n": 3})
            span.add_link(other.get_span_context(), {"kind": "later"})
            span.update_name("contract.after")
            span.set_status(Status(StatusCode.ERROR, "bad"))
        other.end()
        row = self.exported()["contract.after"][-1]
        attrs = {a["key"]: a["value"] for a in row["attributes"]}
        self.assertEqual(attrs["s"], {"stringValue": "text"})
        self.assertEqual(attrs["b"], {"boolValue": True})
        self.assertEqual(attrs["i"], {"intValue": "42"})
        self.assertEqual(attrs["f"], {"doubleValue": 2.5})
        self.assertEqual([v["stringValue"] for v in attrs["ls"]["arrayValue"]["values"]], ["x", "y"])
        self.assertEqual([v["boolValue"] for v in attrs["lb"]["arrayValue"]["values"]], [True, False])
        self.assertEqual([v["intValue"] for v in attrs["li"]["arrayValue"]["values"]], ["1", "2"])
        self.assertEqual([v["doubleValue"] for v in attrs["lf"]["arrayValue"]["values"]], [0.5, 1.5])
        self.assertEqual(row["events"][0]["name"], "checkpoint")
        self.assertEqual(row["links"][0]["spanId"], format(other.get_span_context().span_id, "016x"))
        self.assertEqual(row["status"], {"code": 2, "message": "bad"})

    def test_an_escaping_exception_is_recorded_and_sets_the_status(self):
        with self.assertRaises(KeyError):
            with self.tracer.start_as_current_span("contract.fails"):
                raise KeyError("missing")
        row = self.exported()["contract.fails"][-1]
        self.assertEqual(row["status"]["code"], 2)
        event = row["events"][0]
        self.assertEqual(event["name"], "exception")
        keys = {a["key"]: a["value"] for a in event["attributes"]}
        self.assertEqual(keys["exception.type"], {"stringValue": "KeyError"})
        self.assertIn("raise KeyError", keys["exception.stacktrace"]["stringValue"])
        # record_exception=False, set_status_on_exception=False: neither.
        with self.assertRaises(ValueError):
            with self.tracer.start_as_current_span("contract.quiet", record_exception=False,
                                                   set_status_on_exception=False):
                raise ValueError("x")
        quiet = self.exported()["contract.quiet"][-1]
        self.assertEqual(quiet["events"], [])
        self.assertEqual(quiet["status"]["code"], 0)

    def test_start_as_current_span_decorates_sync_and_async_functions_a_span_per_call(self):
        @self.tracer.start_as_current_span("contract.sync_call")
        def sync_call(x):
            return trace.get_current_span().get_span_context().span_id, x

        @self.tracer.start_as_current_span("contract.async_call")
        async def async_call(x):
            await asyncio.sleep(0)
            return trace.get_current_span().get_span_context().span_id, x

        first, second = sync_call(1), sync_call(2)
        self.assertNotEqual(first[0], second[0], "a span per call")
        self.assertEqual(second[1], 2)
        a = asyncio.run(async_call(3))
        self.assertEqual(a[1], 3)
        spans = self.exported()
        self.assertEqual(len(spans["contract.sync_call"]), 2)
        self.assertEqual(len(spans["contract.async_call"]), 1)
        self.assertEqual(spans["contract.async_call"][0]["spanId"], format(a[0], "016x"))

    def test_end_on_exit_false_leaves_the_span_open(self):
        with self.tracer.start_as_current_span("contract.open", end_on_exit=False) as span:
            pass
        self.assertTrue(span.is_recording())
        span.end()
        self.assertFalse(span.is_recording())

    def test_a_span_never_ended_is_exported_when_collected_marked_as_never_ended(self):
        span = self.tracer.start_span("contract.never_ended")
        self.assertTrue(span.is_recording())
        del span
        gc.collect()
        (never,) = self.exported()["contract.never_ended"]
        self.assertEqual(never["attrs"]["nemo.span.truncated"], True)
        self.assertEqual(never["attrs"]["lens.ended_by"], "garbage collection")
        ended = self.tracer.start_span("contract.ended")
        ended.end()
        del ended
        gc.collect()
        (ended,) = self.exported()["contract.ended"]
        self.assertNotIn("nemo.span.truncated", ended["attrs"])

    def test_use_span_and_the_w3c_propagator_carry_lens_spans(self):
        span = self.tracer.start_span("contract.used")
        with trace.use_span(span, end_on_exit=True):
            self.assertIs(trace.get_current_span(), span)
            headers = {}
            propagate.inject(headers)
        ctx = span.get_span_context()
        self.assertEqual(headers["traceparent"],
                         f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-01")
        # And back: a span under the extracted context continues that trace.
        remote = propagate.extract(headers)
        self.assertTrue(trace.get_current_span(remote).get_span_context().is_remote)
        child = self.tracer.start_span("contract.remote_child", context=remote)
        child.end()
        row = self.exported()["contract.remote_child"][-1]
        self.assertEqual(row["traceId"], f"{ctx.trace_id:032x}")
        self.assertEqual(row["parentSpanId"], f"{ctx.span_id:016x}")

    def test_the_traps_a_duck_typed_span_or_a_foreign_context_would_fall_into(self):
        # What lens.otel avoids, shown on the API itself: a span that is not
        # an opentelemetry.trace.Span is not current, and a context that is
        # not the API's SpanContext is not propagated.
        class DuckSpan:
            def get_span_context(self):
                return trace.SpanContext(1, 2, False, TraceFlags(1))

        token = context.attach(trace.set_span_in_context(DuckSpan()))
        try:
            self.assertFalse(trace.get_current_span().get_span_context().is_valid)
        finally:
            context.detach(token)

        # lens's own context (hex ids), where the API's is expected.
        foreign = NonRecordingSpan(lens.SpanContext.from_traceparent(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"))
        headers = {}
        try:
            propagate.inject(headers, context=trace.set_span_in_context(foreign))
        except Exception:
            pass
        self.assertNotIn("traceparent", headers)
        # lens's spans pass both.
        with self.tracer.start_as_current_span("contract.not_a_trap") as span:
            self.assertIs(trace.get_current_span(), span)
            propagate.inject(headers)
        self.assertIn(f"{span.get_span_context().span_id:016x}", headers["traceparent"])

    def test_a_span_not_recorded_is_a_non_recording_span_with_its_context(self):
        lens.set_span_groups("default")  # "microbatch" off, "job" on
        try:
            with self.tracer.start_as_current_span("contract.parent_on") as parent:
                off = self.tracer.start_span("megatron.microbatch.forward")
                self.assertIsInstance(off, NonRecordingSpan)
                self.assertFalse(off.is_recording())
                self.assertEqual(off.get_span_context(), parent.get_span_context(),
                                 "the parent's context passes through")
        finally:
            lens.set_span_groups("all")
        # Sampled out: a remote parent that says so.
        unsampled = SpanContext(0x1234, 0x5678, True, TraceFlags(0))
        dropped = self.tracer.start_span(
            "contract.sampled_out", context=trace.set_span_in_context(NonRecordingSpan(unsampled)))
        self.assertIsInstance(dropped, NonRecordingSpan)
        self.assertEqual(dropped.get_span_context().trace_id, 0x1234)
        self.assertFalse(dropped.get_span_context().trace_flags.sampled)
        self.assertNotIn("contract.sampled_out", self.exported())

    def test_the_step_span_carries_the_step_and_microbatch_spans_their_ids(self):
        with self.tracer.start_as_current_span("megatron.train.iteration", attributes={"megatron.iteration": 41}):
            for _ in range(3):
                with self.tracer.start_as_current_span("megatron.microbatch.forward"):
                    pass
            with self.tracer.start_as_current_span("megatron.microbatch.backward"):
                pass
        spans = self.exported()
        step = spans["megatron.train.iteration"][-1]
        self.assertEqual(step["attrs"]["dl.step"], "41")
        self.assertEqual(step.get("parentSpanId", ""), "", "a root of the step's shared trace")
        self.assertEqual([s["attrs"]["dl.microbatch_id"] for s in spans["megatron.microbatch.forward"][-3:]],
                         ["0", "1", "2"])
        self.assertEqual(spans["megatron.microbatch.backward"][-1]["attrs"]["dl.microbatch_id"], "0")

    def test_nemo_helpers_have_nemo_lens_call_shapes(self):
        self.assertTrue(nemo.is_span_group_enabled("step"))
        with self.assertRaises(ValueError):
            nemo.is_span_group_enabled("nonsense")
        with nemo.managed_span("job", "nemo.managed", None, flavour="x") as span:
            nemo.safe_set_span_attributes(span, {"a": 1}, b=2)
            nemo.safe_set_span_attributes(None, {"a": 1})  # never raises
        with nemo.span_cm("nemo.cm", record_exception=True, c=3):
            pass

        @nemo.trace_fn("job", "nemo.fn")
        def work():
            return trace.get_current_span()

        self.assertTrue(work().get_span_context().is_valid)
        with nemo.managed_span("job", "nemo.source") as source:
            carrier = {}
            propagate.inject(carrier)
        linked = nemo.create_linked_span(trace.get_tracer("nemo.lens"), "nemo.linked",
                                         remote_carrier=carrier, **{"dl.microbatch_id": 0})
        linked.end()
        by_context = nemo.create_linked_span(None, "nemo.linked_ctx",
                                             remote_context=source.get_span_context())
        by_context.end()
        lens.set_span_groups("default")
        try:
            with nemo.managed_span("step", "nemo.off") as off:
                self.assertFalse(off.is_recording())
        finally:
            lens.set_span_groups("all")
        spans = self.exported()
        self.assertEqual(spans["nemo.managed"][-1]["attrs"], {"flavour": "x", "a": "1", "b": "2"})
        self.assertEqual(spans["nemo.cm"][-1]["attrs"], {"c": "3"})
        self.assertIn("nemo.fn", spans)
        self.assertNotIn("nemo.off", spans)
        source_id = format(source.get_span_context().span_id, "016x")
        for name in ("nemo.linked", "nemo.linked_ctx"):
            self.assertEqual([l["spanId"] for l in spans[name][-1]["links"]], [source_id], name)


class Layout(unittest.TestCase):
    def test_megatron_default_order_puts_tp_fastest_and_pp_slowest(self):
        attrs = {"dl.rank": 13, "dl.world_size": 16, "dl.tensor_parallel.size": 2,
                 "dl.pipeline_parallel.size": 4, "dl.data_parallel.size": 2}
        got = lens.otel.layout_from_attributes(attrs)
        # 13 = tp 1 + 2 * (dp 0) + 4 * (pp 3)
        self.assertEqual((got["tp"], got["dp"], got["pp"]), (1, 0, 3))
        self.assertEqual(got["pipeline_source"], 1, "the same tp and dp at pp 0")
        other = lens.otel.layout_from_attributes(attrs, order="tp-cp-ep-pp-dp")
        # 13 = tp 1 + 2 * (pp 2) + 8 * (dp 1)
        self.assertEqual((other["tp"], other["pp"], other["dp"]), (1, 2, 1))
        with self.assertRaises(lens.ConfigError) as caught:
            lens.otel.layout_from_attributes(attrs, order="tp-pp-dp")
        self.assertIn("must name tp, cp, ep, dp and pp once each", str(caught.exception))
        self.assertIsNone(lens.otel.layout_from_attributes({"dl.world_size": 4}))

    def test_sizes_that_do_not_fit_the_world_are_refused_naming_them(self):
        for attrs, words in (
                ({"dl.rank": 0, "dl.world_size": 8, "dl.pipeline_parallel.size": 3}, "product is 3"),
                ({"dl.rank": 9, "dl.world_size": 4, "dl.pipeline_parallel.size": 4}, "rank 9 of world size 4"),
                ({"dl.rank": "x"}, "not an integer"),
                ({"dl.rank": 0, "dl.pipeline_parallel.size": 0}, "at least 1")):
            with self.assertRaises(lens.ConfigError) as caught:
                lens.otel.layout_from_attributes(attrs)
            self.assertIn(words, str(caught.exception))


class LayoutFromMegatron(unittest.TestCase):
    """Megatron's megatron.core.parallel_state, when the process loaded it,
    places the rank when no resource does. Its module and the rank's place
    in torch.distributed are stand-ins here (Megatron is not installed):
    what is checked is which getters lens reads and how it uses them."""

    CODE = (
        "import sys, types\n"
        "import torch.distributed as dist\n"
        "dist.get_rank = lambda group=None: 5\n"
        "dist.get_world_size = lambda group=None: 8\n"
        "state = types.ModuleType('megatron.core.parallel_state')\n"
        "state.model_parallel_is_initialized = lambda: True\n"
        "state.get_tensor_model_parallel_world_size = lambda: 2\n"
        "state.get_pipeline_model_parallel_world_size = lambda: 2\n"
        "state.get_data_parallel_world_size = lambda: 2\n"
        "state.get_context_parallel_world_size = lambda: 1\n"
        "state.get_pipeline_model_parallel_rank = lambda: PP\n"
        "sys.modules['megatron.core.parallel_state'] = state\n"
        "from opentelemetry import trace\n"
        "with trace.get_tracer('t').start_as_current_span('megatron.train.iteration') as s:\n"
        "    pass\n"
        "import lens.otel\n"
        "r = lens.otel._rank\n"
        "print(r.layout['rank'], r.layout['pp'], r.layout['dp'], r.layout['tp'], r.stages)\n")

    def test_its_sizes_place_the_rank_and_a_stage_it_disagrees_on_is_said(self):
        with tempfile.TemporaryDirectory() as d:
            # rank 5 = tp 1 + 2 * (dp 0) + 4 * (pp 1), Megatron's default order
            r = run_python(self.CODE.replace("PP", "1"),
                           {"OTEL_PYTHON_TRACER_PROVIDER": "lens", "LENS_TRACE_DIR": d})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.split(), ["5", "1", "0", "1", "2"])
            self.assertNotIn("parallel_state puts", r.stderr)
            r = run_python(self.CODE.replace("PP", "0"),
                           {"OTEL_PYTHON_TRACER_PROVIDER": "lens", "LENS_TRACE_DIR": d})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("megatron.core.parallel_state puts this rank at pipeline stage 0, the "
                          "rank order tp-cp-ep-dp-pp at 1: set LENS_RANK_ORDER", r.stderr)


def otlp_value(value):
    """An OTLP/JSON AnyValue as Python."""
    (kind, v), = value.items()
    if kind == "intValue":
        return int(v)
    if kind == "arrayValue":
        return [otlp_value(x) for x in v.get("values", [])]
    return v


class NeverHurts(unittest.TestCase):
    """No call of lens.otel raises into the caller or blocks it (#72)."""

    @staticmethod
    def lens_spans(folder):
        """name -> [span dicts] of the lens files in `folder`, attributes as Python."""
        spans = {}
        for path in glob.glob(os.path.join(folder, "*.otlp.jsonl")):
            with open(path) as f:
                for line in f:
                    for rs in json.loads(line)["resourceSpans"]:
                        for ss in rs["scopeSpans"]:
                            for s in ss["spans"]:
                                s["attrs"] = {a["key"]: otlp_value(a["value"])
                                              for a in s.get("attributes", [])}
                                spans.setdefault(s["name"], []).append(s)
        return spans

    def test_every_key_and_value_kept_as_the_sdk_keeps_it_on_every_path_and_nothing_raises(self):
        with tempfile.TemporaryDirectory() as d:
            r = self.run_script("otel_attribute_table.py", d, "table", 120)
            self.assertEqual(r.returncode, 0, r.stderr)
            table = json.loads(r.stdout)
            self.assertEqual(table["errors"], [])
            spans = self.lens_spans(os.path.join(d, "table"))
            # What lens's core cannot hold, so drops with the API's warning
            # where the SDK keeps it: bytes, maps, sequences of mixed types;
            # None in a sequence is left out; an int beyond 64 bits is its
            # decimal text. (A lone surrogate is U+FFFD in both, as JSON.)
            differs = {"5": "text", "10": None, "11": "no None", "13": None, "14": None}
            for case, sdk in table["cases"].items():
                c = spans[f"case{case}.c"][0]["attrs"]
                general = spans[f"case{case}.general"][0]["attrs"]
                after = spans[f"case{case}.set"][0]["attrs"]
                with self.subTest(case=case, sdk=sdk, c=c, general=general, set=after):
                    self.assertEqual(c, general, "one conversion on both start paths")
                    for got, kept in ((c, sdk["sdk_start"]), (after, sdk["sdk_set"])):
                        kept = {k: v for k, v in kept.items() if v is not None}
                        if case in differs:
                            if differs[case] == "text":
                                kept = {k: str(v) for k, v in kept.items()}
                            elif differs[case] == "no None":
                                kept = {k: [x for x in v if x is not None] for k, v in kept.items()}
                            else:
                                kept = {}
                        self.assertEqual(got, kept)
            for name in ("map.proxy.c", "map.proxy.general", "map.bounded.c",
                         "map.bounded.general"):
                self.assertEqual(spans[name][0]["attrs"], {"m.k": 1}, name)
            self.assertIn("n\ufffd", spans)  # a lone surrogate in a name
            self.assertIn("invalid key `5`. must be non-empty string", r.stderr)

    @staticmethod
    def under_lens(argv, trace_dir, run_id, timeout, env=None):
        """This interpreter running `argv` with lens the provider, its spans
        in trace_dir/run_id."""
        full = dict(os.environ, OTEL_PYTHON_TRACER_PROVIDER="lens", LENS_TRACE_DIR=trace_dir,
                    MEGATRON_OTEL_RUN_ID=run_id, **(env or {}))
        return subprocess.run([sys.executable, *argv], env=full, capture_output=True, text=True,
                              timeout=timeout)

    def run_script(self, name, trace_dir, run_id, timeout):
        return self.under_lens([os.path.join(HERE, name)], trace_dir, run_id, timeout)

    def run_code(self, code, env=None, timeout=60):
        with tempfile.TemporaryDirectory() as d:
            r = self.under_lens(["-c", code], d, "hurts", timeout, env)
            spans = self.lens_spans(os.path.join(d, "hurts"))
        return r, spans

    SPANS = ("from opentelemetry import trace\n"
             "from opentelemetry.trace import NonRecordingSpan\n"
             "t = trace.get_tracer('t')\n"
             "got = []\n"
             "for i in range(3):\n"
             "    with t.start_as_current_span('a') as s:\n"
             "        got.append(isinstance(s, NonRecordingSpan))\n"
             "    s = t.start_span('b'); got.append(isinstance(s, NonRecordingSpan)); s.end()\n"
             "print(got)\n")

    def test_a_setting_that_cannot_be_set_up_is_said_once_and_spans_are_not_recorded(self):
        for env, words in (({"OTEL_BSP_MAX_QUEUE_SIZE": "abc"}, "OTEL_BSP_MAX_QUEUE_SIZE"),
                           ({"OTEL_RESOURCE_ATTRIBUTES": "dl.rank=abc"}, "dl.rank='abc'"),
                           ({"OTEL_RESOURCE_ATTRIBUTES": "dl.rank=1,dl.world_size=4,"
                                                         "dl.pipeline_parallel.size=3"},
                            "product is 3")):
            with self.subTest(env=env):
                r, spans = self.run_code(self.SPANS, env)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stdout.strip(), str([True] * 6))
                self.assertEqual(r.stderr.count("lens.otel: spans are not recorded in this "
                                                "process"), 1, r.stderr)
                self.assertIn(words, r.stderr)

    def test_a_child_forked_while_a_thread_held_the_setup_lock_does_not_hang_and_says_so(self):
        code = ("import os, threading, time, signal\n"
                "import lens.otel\n"
                "from opentelemetry import trace\n"
                "held = threading.Event()\n"
                "def hold():\n"
                "    with lens.otel._setup_lock:\n"
                "        held.set(); time.sleep(2)\n"
                "threading.Thread(target=hold, daemon=True).start()\n"
                "held.wait()\n"
                "pid = os.fork()\n"
                "if pid == 0:\n"
                "    signal.alarm(20)\n"
                "    with trace.get_tracer('t').start_as_current_span('child') as s:\n"
                "        print('child recording', s.is_recording(), flush=True)\n"
                "    os._exit(0)\n"
                "_, status = os.waitpid(pid, 0)\n"
                "print('child status', status)\n"
                "with trace.get_tracer('t').start_as_current_span('parent') as s:\n"
                "    print('parent recording', s.is_recording())\n"
                "trace.get_tracer_provider().force_flush()\n")
        r, spans = self.run_code(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("child recording False", r.stdout)
        self.assertIn("child status 0", r.stdout)
        self.assertIn("parent recording True", r.stdout)
        self.assertIn("lens records no spans in a forked child", r.stderr)
        self.assertIn("parent", spans)
        self.assertNotIn("child", spans)

    def test_a_generator_resumed_in_another_context_ends_its_span_and_logs_the_detach(self):
        code = ("import contextvars, logging\n"
                "from opentelemetry import trace\n"
                "logging.basicConfig()\n"
                "t = trace.get_tracer('t')\n"
                "def work():\n"
                "    with t.start_as_current_span('generator'):\n"
                "        yield 1\n"
                "        yield 2\n"
                "g = work()\n"
                "next(g)\n"
                "print(contextvars.copy_context().run(lambda: list(g)))\n"
                "trace.get_tracer_provider().force_flush()\n")
        r, spans = self.run_code(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "[2]")
        self.assertIn("Failed to detach context", r.stderr)
        self.assertEqual(len(spans["generator"]), 1, "the span ended and was exported")

    def test_start_span_as_a_context_manager_records_the_exception_and_error(self):
        code = ("from opentelemetry import trace\n"
                "t = trace.get_tracer('t')\n"
                "try:\n"
                "    with t.start_span('failing'):\n"
                "        raise KeyError('k')\n"
                "except KeyError:\n"
                "    pass\n"
                "with t.start_span('quiet', record_exception=False,\n"
                "                  set_status_on_exception=False) as s:\n"
                "    pass\n"
                "trace.get_tracer_provider().force_flush()\n")
        r, spans = self.run_code(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        failing = spans["failing"][0]
        self.assertEqual([e["name"] for e in failing["events"]], ["exception"])
        self.assertEqual(failing["status"]["code"], 2)
        self.assertIn("KeyError", failing["status"]["message"])

    def test_the_name_cache_is_bounded_resource_values_decoded_and_counters_shared_by_threads(self):
        code = ("import threading\n"
                "from opentelemetry import trace\n"
                "import lens.otel\n"
                "t = trace.get_tracer('t')\n"
                "for i in range(10000):\n"
                "    with t.start_as_current_span(f'name.{i}'):\n"
                "        pass\n"
                "print('cache', len(lens.otel._groups))\n"
                "print('service', lens.otel._resource_attributes()['service.name'])\n"
                "step = t.start_span('megatron.train.iteration',\n"
                "                    attributes={'megatron.iteration': 0})\n"
                "def forwards():\n"
                "    for _ in range(500):\n"
                "        t.start_span('megatron.microbatch.forward').end()\n"
                "threads = [threading.Thread(target=forwards) for _ in range(2)]\n"
                "for th in threads: th.start()\n"
                "for th in threads: th.join()\n"
                "step.end()\n"
                "trace.get_tracer_provider().force_flush()\n")
        r, spans = self.run_code(code, {"OTEL_RESOURCE_ATTRIBUTES": "service.name=a%20b%2Cc"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("cache 4096", r.stdout)
        self.assertIn("service a b,c", r.stdout)
        ids = sorted(s["attrs"]["dl.microbatch_id"] for s in spans["megatron.microbatch.forward"])
        self.assertEqual(ids, list(range(1000)), "each thread's span a number of its own")

    def test_eight_threads_under_forks_and_a_shutdown_raise_nothing_hang_nowhere_and_add_up(self):
        with tempfile.TemporaryDirectory() as d:
            r = self.run_script("otel_stress.py", d, "stress", 300)
            self.assertEqual(r.returncode, 0, r.stderr[-2000:])
            got = json.loads(r.stdout)
            self.assertEqual(got["errors"], [])
            self.assertEqual(got["children"], [0] * 6, "no child hung or failed")
            self.assertFalse(got["initialized"], "shut down for good")
            lines = 0
            for path in glob.glob(os.path.join(d, "stress", "*.otlp.jsonl")):
                with open(path) as f:
                    lines += sum(len(ss["spans"]) for line in f
                                 for rs in json.loads(line)["resourceSpans"]
                                 for ss in rs["scopeSpans"])
            # The shutdown's account, which a rank writes when not every span
            # was exported: every span recorded (and the warm-up) is
            # exported, spooled or dropped, each counted. Without it, every
            # one was exported.
            account = re.search(r"lens: shutdown: (\d+) spans: (\d+) exported, (\d+) spooled, "
                                r"(\d+) dropped", r.stderr)
            total = got["recorded"] + 1
            if account is None:
                self.assertEqual(lines, total, r.stderr[-2000:])
            else:
                counted, exported, spooled, dropped = map(int, account.groups())
                self.assertEqual(counted, total)
                self.assertEqual(exported + spooled + dropped, total)
                self.assertEqual(lines, exported, "the file holds every span exported")

    def test_a_providers_shutdown_ends_that_provider_and_a_shut_telemetry_stays_shut(self):
        code = ("from opentelemetry import trace\n"
                "import lens.otel\n"
                "from lens import nemo\n"
                "t = trace.get_tracer('t')\n"
                "other = lens.otel.TracerProvider()\n"
                "o = other.get_tracer('o')\n"
                "other.shutdown()\n"
                "print(o.start_span('of the other').is_recording(),\n"
                "      t.start_span('after the other').is_recording())\n"
                "trace.get_tracer_provider().shutdown()\n"
                "print(t.start_span('after').is_recording(), nemo.is_span_group_enabled('step'))\n")
        r, spans = self.run_code(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["False", "True", "False", "False"])
        self.assertIn("after the other", spans)
        self.assertNotIn("after", spans)


class DeviceTimed(unittest.TestCase):
    """Megatron's compute spans on the device's clock when the process uses
    CUDA, with no call-site change (otel_device_spans.py)."""

    DEVICE = {"megatron.microbatch.forward": 4_000_000, "megatron.microbatch.backward": 6_000_000,
              "megatron.layer.attention": 1_000_000, "megatron.other": 2_000_000}

    def spans(self, mode, env=None):
        with tempfile.TemporaryDirectory() as d:
            r = NeverHurts.under_lens([os.path.join(HERE, "otel_device_spans.py"), mode], d,
                                      "device", 60, env)
            self.assertEqual(r.returncode, 0, r.stderr)
            return NeverHurts.lens_spans(os.path.join(d, "device"))

    def timed(self, spans):
        """name -> the device's duration, of the spans timed on the device;
        each keeps its host times, which enclose nothing of the device's."""
        out = {}
        for name, (span,) in spans.items():
            if "lens.host.start_unix_ns" not in span["attrs"]:
                continue
            start, end = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
            host_start = int(span["attrs"]["lens.host.start_unix_ns"])
            self.assertGreater(start - host_start, 100_000_000, name)  # 200 ms behind its launch
            out[name] = end - start
        return out

    def test_compute_spans_are_device_timed_under_cuda_and_the_rest_stay_on_the_host(self):
        got = self.timed(self.spans("cuda"))
        self.assertEqual(sorted(got), ["megatron.layer.attention", "megatron.microbatch.backward",
                                       "megatron.microbatch.forward"])
        for name, ns in got.items():
            self.assertAlmostEqual(ns, self.DEVICE[name], delta=1_000, msg=name)

    def test_the_set_is_a_setting_and_without_cuda_nothing_is_device_timed(self):
        self.assertEqual(self.timed(self.spans("cuda", {"LENS_DEVICE_SPANS": ""})), {})
        got = self.timed(self.spans("cuda", {"LENS_DEVICE_SPANS": "megatron.other, megatron.l*"}))
        self.assertEqual(sorted(got), ["megatron.layer.attention", "megatron.other"])
        self.assertEqual(self.timed(self.spans("host")), {})


def run_python(code, env_extra):
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)


class Selection(unittest.TestCase):
    def test_the_environment_variable_selects_lens_through_its_entry_point(self):
        with tempfile.TemporaryDirectory() as d:
            r = run_python("from opentelemetry import trace\n"
                           "p = trace.get_tracer_provider()\n"
                           "print(type(p).__module__ + '.' + type(p).__name__)\n"
                           "with trace.get_tracer('t').start_as_current_span('selected') as s:\n"
                           "    print(s.get_span_context().is_valid)\n",
                           {"OTEL_PYTHON_TRACER_PROVIDER": "lens", "LENS_TRACE_DIR": d})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.split(), ["lens.otel.TracerProvider", "True"])

    def test_the_kill_switch_leaves_every_span_non_recording(self):
        with tempfile.TemporaryDirectory() as d:
            r = run_python("from opentelemetry import trace\n"
                           "from opentelemetry.trace import NonRecordingSpan\n"
                           "s = trace.get_tracer('t').start_span('x')\n"
                           "print(isinstance(s, NonRecordingSpan))\n",
                           {"OTEL_PYTHON_TRACER_PROVIDER": "lens", "MEGATRON_OTEL_ENABLED": "0",
                            "LENS_TRACE_DIR": d})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.split(), ["True"])

    def test_installing_after_another_provider_names_it(self):
        r = run_python("from opentelemetry import trace\n"
                       "from opentelemetry.sdk.trace import TracerProvider\n"
                       "trace.set_tracer_provider(TracerProvider())\n"
                       "import lens.otel\n"
                       "lens.otel.install()\n", {})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("a tracer provider was set before lens's: "
                      "opentelemetry.sdk.trace.TracerProvider", r.stderr)


class NemoLensPipeline(unittest.TestCase):
    """Megatron-LM's upstream instrumentation through the real nemo-lens
    package (nemo_lens_pipeline.py), in 4 processes, with only the settings
    docs/megatron-traces.md tells a Megatron user: under lens (taken over at
    start-up by lens-otel.pth, nemo-lens's own provider refused, its resource
    taken), and under the SDK provider nemo-lens builds."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="lens-nemo-")
        cls.nemo_lens = nemo_lens_wheel.loadable_copy(os.path.join(cls.tmp.name, "nemo-lens"))
        lens_python = os.path.dirname(os.path.dirname(os.path.abspath(lens.__file__)))
        cls.python = nemo_lens_wheel.environment_with_hook(os.path.join(cls.tmp.name, "venv"),
                                                           lens_python)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    MEGATRON = {"MEGATRON_OTEL_ENABLED": "1", "MEGATRON_OTEL_EXPORT_STRATEGY": "all_ranks",
                "MEGATRON_OTEL_SPAN_GROUPS": "all", "MEGATRON_OTEL_METRICS_ENABLED": "0"}

    def run_pipeline(self, out, env_extra, *args, python=None, steps=6):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OTEL_", "MEGATRON_OTEL_", "NEMO_LENS_", "LENS_"))}
        env.update(env_extra, NEMO_LENS_PATH=self.nemo_lens)
        r = subprocess.run([python or self.python, NEMO_LENS_PIPELINE, "--world", "4", "--steps",
                            str(steps), "--microbatches", "4", "--out", out, *args],
                           env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        return r

    def lens(self, *args, env=None):
        return subprocess.run([os.environ["LENS_BIN"], *args], capture_output=True, text=True,
                              env=env)

    def run_folder(self, d):
        runs = [e for e in os.listdir(d) if os.path.isdir(os.path.join(d, e))]
        self.assertEqual(len(runs), 1, f"one run folder (the run id every rank shares): {runs}")
        return os.path.join(d, runs[0])

    def linked_spans_and_sources(self, run):
        traces_by_step, sources, linked = {}, {}, {}
        for rank in range(4):
            spans = read_spans(os.path.join(run, f"rank-{rank}.otlp.jsonl"))
            for s in spans["megatron.train.iteration"]:
                traces_by_step.setdefault(s["attrs"]["dl.step"], set()).add(s["traceId"])
                if rank == 0:
                    sources[s["traceId"]] = s["spanId"]
            linked[rank] = spans.get("megatron.pp.recv_forward.linked", [])
        for rank, spans in linked.items():
            for l in spans:
                self.assertEqual([k["spanId"] for k in l["links"]], [sources[l["traceId"]]],
                                 f"rank {rank}: one link, to rank 0's step span")
        self.assertTrue(all(len(t) == 1 for t in traces_by_step.values()), traces_by_step)
        return traces_by_step, linked

    def test_under_lens_nemo_lenss_provider_is_refused_its_layout_taken_and_the_slow_stage_named(self):
        with tempfile.TemporaryDirectory() as d:
            r = self.run_pipeline(d, dict(self.MEGATRON, OTEL_PYTHON_TRACER_PROVIDER="lens",
                                          LENS_TRACE_DIR=d), "--slow-stage", "2")
            for rank in range(4):
                self.assertIn("lens.otel: kept lens's tracer provider (OTEL_PYTHON_TRACER_PROVIDER"
                              "=lens); refused opentelemetry.sdk.trace.TracerProvider and took its "
                              "resource (dl.data_parallel.size=1, dl.pipeline_parallel.size=4, "
                              f"dl.rank={rank}, dl.tensor_parallel.size=1, dl.world_size=4, "
                              "nemo.lens.run_uuid=", r.stderr)
            run = self.run_folder(d)  # named by nemo.lens.run_uuid: no run id was set
            check = self.lens("check", run)
            self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
            self.assertIn("4 ranks, 6 steps", check.stdout)
            self.assertIn("every step is one trace; every link resolves", check.stdout)
            traces_by_step, linked = self.linked_spans_and_sources(run)
            self.assertEqual(len(traces_by_step), 6)
            # stage s's first P - s receives of a step (warmup and pre-1F1B)
            self.assertEqual({r: len(l) for r, l in linked.items()}, {0: 0, 1: 18, 2: 12, 3: 6})
            a = json.loads(self.lens("analyze", "--json", run).stdout)
            self.assertIsNone(a["inferred"])
            self.assertEqual((a["steps"], a["pipeline_stages"], a["microbatches"]), (6, 4, 4))
            self.assertEqual(a["slowest_stage"], 2, a["stages"])

    def test_the_seed_pages_own_linked_receives_are_linked_by_lens_and_not_doubled(self):
        with tempfile.TemporaryDirectory() as d:
            self.run_pipeline(d, dict(self.MEGATRON, OTEL_PYTHON_TRACER_PROVIDER="lens",
                                      LENS_TRACE_DIR=d), "--seed-links")
            run = self.run_folder(d)
            check = self.lens("check", run)
            self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
            self.assertIn("every step is one trace; every link resolves", check.stdout)
            traces_by_step, linked = self.linked_spans_and_sources(run)
            self.assertEqual(len(traces_by_step), 6)
            self.assertEqual({r: len(l) for r, l in linked.items()}, {0: 0, 1: 18, 2: 12, 3: 6})
            # The application's spans (its attributes), not lens's beside them.
            for rank in (1, 2, 3):
                ids = sorted(int(l["attrs"]["dl.microbatch_id"]) for l in linked[rank])
                self.assertEqual(ids, sorted(list(range(4 - rank)) * 6), rank)

    def test_nemo_lenss_default_export_strategy_is_named_on_the_ranks_it_leaves_out(self):
        with tempfile.TemporaryDirectory() as d:
            env = {k: v for k, v in self.MEGATRON.items() if k != "MEGATRON_OTEL_EXPORT_STRATEGY"}
            r = self.run_pipeline(d, dict(env, OTEL_PYTHON_TRACER_PROVIDER="lens",
                                          LENS_TRACE_DIR=d), steps=2)
            # Ranks 0-2 are left out by single_rank (the last rank exports).
            self.assertEqual(r.stderr.count("refused opentelemetry.trace.NoOpTracerProvider: "
                                            "nemo-lens sets it where telemetry is off or its "
                                            "export strategy leaves this rank out"), 3, r.stderr)
            self.assertIn("set MEGATRON_OTEL_EXPORT_STRATEGY=all_ranks to record every rank",
                          r.stderr)
            # Only the last rank recorded: lens check names the others, and why.
            check = self.lens("check", self.run_folder(d))
            self.assertEqual(check.returncode, 1, check.stdout + check.stderr)
            self.assertEqual(check.stdout.count(
                "no trace file for this rank (the run has 4 ranks); nemo-lens's export strategy "
                "single_rank leaves ranks out (the default, single_rank, records the last rank "
                "only): set MEGATRON_OTEL_EXPORT_STRATEGY=all_ranks"), 3, check.stdout)

    def test_under_nemo_lenss_sdk_provider_a_run_id_per_rank_is_read_as_one_run_inferred(self):
        with tempfile.TemporaryDirectory() as d:
            # The SDK's provider (no OTEL_PYTHON_TRACER_PROVIDER), no run id
            # set: nemo-lens makes a random nemo.run.id in each process.
            self.run_pipeline(d, self.MEGATRON, "--sdk-log", "--combined-untraced",
                              "--slow-stage", "2", python=sys.executable, steps=8)
            run_ids = set()
            for rank in range(4):
                with open(os.path.join(d, f"sdk-rank-{rank}.log")) as f:
                    for line in f:
                        if line.startswith("{"):
                            run_ids.add(json.loads(line)["resource"]["attributes"]["nemo.run.id"])
            self.assertEqual(len(run_ids), 4, run_ids)
            check = self.lens("check", d)
            self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
            self.assertIn("inferred: Megatron-LM upstream traces", check.stdout)
            self.assertIn("4 ranks, 8 steps", check.stdout)
            a = json.loads(self.lens("analyze", "--json", d).stdout)
            self.assertIn("steps by megatron.iteration", a["inferred"])
            self.assertEqual((a["steps"], a["pipeline_stages"], a["microbatches"]), (8, 4, 4))
            self.assertEqual(a["slowest_stage"], 2, a["stages"])


class StepNames(unittest.TestCase):
    """A run of no step fails lens check, naming the step names it looked
    for; LENS_STEP_SPAN names another, for the provider and the reader."""

    CODE = ("from opentelemetry import trace\n"
            "t = trace.get_tracer('t')\n"
            "for i in range(3):\n"
            "    with t.start_as_current_span('my.step', attributes={'megatron.iteration': i}):\n"
            "        with t.start_as_current_span('megatron.microbatch.forward'):\n"
            "            pass\n"
            "trace.get_tracer_provider().shutdown()\n")

    def test_no_step_fails_and_the_setting_names_the_step_for_recording_and_reading(self):
        lens_bin = os.environ["LENS_BIN"]
        for setting in (None, "my.step"):
            with self.subTest(setting=setting), tempfile.TemporaryDirectory() as d:
                env = {"OTEL_PYTHON_TRACER_PROVIDER": "lens", "LENS_TRACE_DIR": d,
                       "MEGATRON_OTEL_RUN_ID": "names"}
                if setting:
                    env["LENS_STEP_SPAN"] = setting
                r = run_python(self.CODE, env)
                self.assertEqual(r.returncode, 0, r.stderr)
                check_env = dict(os.environ, **({"LENS_STEP_SPAN": setting} if setting else {}))
                check = subprocess.run([lens_bin, "check", os.path.join(d, "names")],
                                       capture_output=True, text=True, env=check_env)
                if setting is None:
                    self.assertEqual(check.returncode, 1, check.stdout + check.stderr)
                    self.assertIn("FAIL no step span in the run: looked for megatron.train_step, "
                                  "megatron.train.iteration; set LENS_STEP_SPAN", check.stdout)
                    self.assertIn("1 ranks, 0 steps", check.stdout)
                else:
                    self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
                    self.assertIn("1 ranks, 3 steps", check.stdout)


class UpstreamTraces(unittest.TestCase):
    """A job's upstream traces, read by lens after the fact: the OTel SDK's
    spans (every iteration in a trace per rank, the steady state's combined
    calls untraced as upstream leaves them) through the SDK's console
    exporter (a span a line among the ranks' own output) and as a
    collector's file exporter writes them (protobuf, and OTLP/JSON), the
    same spans exported three ways at once."""

    def run_pipeline(self, out, env_extra, *args):
        env = {k: v for k, v in os.environ.items() if k != "OTEL_PYTHON_TRACER_PROVIDER"}
        env.update(env_extra)
        r = subprocess.run([sys.executable, PIPELINE, "--world", "4", "--steps", "8",
                            "--microbatches", "4", "--slow-stage", "2", "--out", out, *args],
                           env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def lens(self, *args):
        return subprocess.run([os.environ["LENS_BIN"], *args], capture_output=True, text=True)

    def test_the_views_read_them_inferred_and_the_three_layouts_of_one_run_alike(self):
        with tempfile.TemporaryDirectory() as d:
            upstream = os.path.join(d, "upstream")
            os.makedirs(upstream)
            self.run_pipeline(upstream, {}, "--sdk", "--combined-untraced", "--run-uuid", "u-1")
            # One recorded run read three ways: the figures agree, whatever
            # the machine's load made of the run's timings.
            shares = {}
            for layout in ("console", "proto", "json"):
                with self.subTest(layout=layout):
                    run = os.path.join(upstream, layout)
                    check = self.lens("check", run)
                    self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
                    self.assertIn("inferred: Megatron-LM upstream traces", check.stdout)
                    self.assertIn("4 ranks, 8 steps", check.stdout)
                    # 1F1B over 4 stages and 4 microbatches: stage s switches
                    # direction 1, 3, 5 and 7 times a step (s = 0..3), each
                    # switch a combined call taking a send and a receive out
                    # of the trace: 6 of each kind a step of the 12 the three
                    # stages with that neighbour make, over 8 steps.
                    self.assertIn("untraced transfers: 48 of 96 forward receives, 48 of 96 "
                                  "forward sends, 48 of 96 backward receives, 48 of 96 "
                                  "backward sends", check.stderr)
                    if layout == "console":
                        self.assertIn("lines that are not spans", check.stderr)
                    # No clock samples upstream: the pipeline's clocks bounded by
                    # its matched transfers (every rank shares this host's clock,
                    # so the least correction the bounds allow is none).
                    self.assertIn("inferred: clocks of rank 0's pipeline (4 ranks) from",
                                  check.stderr)
                    inferred = json.loads(self.lens("analyze", "--json", run).stdout)
                    self.assertIn("steps by megatron.iteration", inferred["inferred"])
                    self.assertEqual(inferred["steps"], 8)
                    # Stage 2 sleeps 12 ms a microbatch more: many times the
                    # others' compute, whatever else the machine runs.
                    self.assertEqual(inferred["slowest_stage"], 2, inferred["stages"])
                    shares[layout] = {s["stage"]: s["critical_share_p50"]
                                      for s in inferred["stages"]}
                    table = self.lens("analyze", run)
                    self.assertTrue(table.stdout.startswith("inferred: "), table.stdout[:200])
                    self.assertIn("clock: aligned to rank 0 by 4 samples of 4 ranks", table.stdout)
                    self.assertIn("causality: 0 of", table.stdout)
            # (the console's times are in microseconds, the files' in ns)
            for stage, share in shares["json"].items():
                self.assertAlmostEqual(shares["proto"][stage], share, places=6)
                self.assertAlmostEqual(shares["console"][stage], share, places=3)


class UpstreamLayout(unittest.TestCase):
    """A generated TP2 x PP4 x DP2 upstream run (megatron_layout_run.py: the
    real SDK, upstream's names, a collector's protobuf file): every rank
    placed by Megatron's default order, the slowed stage named in every
    replica and TP rank."""

    def test_sixteen_ranks_placed_by_megatrons_order_and_the_slowed_stage_named(self):
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([sys.executable, LAYOUT_RUN, d, "--steps", "4",
                                "--microbatches", "8", "--slow-stage", "2"],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            lens = os.environ["LENS_BIN"]
            check = subprocess.run([lens, "check", d], capture_output=True, text=True)
            self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
            self.assertIn("16 ranks, 4 steps", check.stdout)
            self.assertIn("12 ranks outside rank 0's pipeline", check.stderr)
            a = json.loads(subprocess.run([lens, "analyze", "--json", d], capture_output=True,
                                          text=True).stdout)
            self.assertEqual((a["steps"], a["pipeline_stages"], a["microbatches"],
                              a["replicas"], a["tensor_parallel"]), (4, 4, 8, 2, 2))
            self.assertEqual(a["slowest_stage"], 2, a["stages"])
            self.assertEqual(len(a["stages"]), 16)
            for s in a["stages"]:
                r = s["rank"]
                # tp-cp-ep-dp-pp, tp fastest
                self.assertEqual((s["tensor"], s["replica"], s["stage"]),
                                 (r % 2, r // 2 % 2, r // 4), s)
                # 3x the compute: the slowed stage's microbatches cost 3x the
                # fastest's and it holds most of its pipeline's critical path.
                if s["stage"] == 2:
                    self.assertAlmostEqual(s["relative"], 3.0, places=2)
                    self.assertGreater(s["critical_share_p50"], 0.5)
                else:
                    self.assertLess(s["critical_share_p50"], 0.2)


if __name__ == "__main__":
    unittest.main()
