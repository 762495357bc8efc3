"""Unit tests of the lens Python package (one process; each test initialises
its own telemetry writing to a fresh directory and reads the file back)."""

import json
import os
import struct
import tempfile
import unittest

import lens
import lens_cxx_probe


def spans_of(path):
    out = []
    with open(path) as f:
        for line in f:
            for rs in json.loads(line)["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    for s in ss["spans"]:
                        s["scope"] = ss["scope"]["name"]
                        s["attrs"] = {a["key"]: a["value"] for a in s.get("attributes", [])}
                        out.append(s)
    return out


class Traced(unittest.TestCase):
    """Telemetry initialised to a file with the given groups; shut down after."""

    groups = "all"

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="lens-py-unit-")
        self.telemetry = lens.init(enabled=True, exporter="file", trace_dir=self.dir,
                                   span_groups=self.groups, rank=0, world_size=1)
        self.path = self.telemetry.trace_file

    def tearDown(self):
        lens.shutdown()

    def finish(self):
        self.assertTrue(lens.shutdown())
        return spans_of(self.path)


class Spans(Traced):
    def test_attributes_keep_their_types(self):
        with lens.managed_span("s", "step", i=3, f=0.5, b=True, t="x", ints=[1, 2], strs=("a", "b"),
                               big=2**70, other=object()) as span:
            self.assertTrue(span.recording)
            span.set_attribute("late", 7)
        (s,) = self.finish()
        a = s["attrs"]
        self.assertEqual(a["i"], {"intValue": "3"})
        self.assertEqual(a["f"], {"doubleValue": 0.5})
        self.assertEqual(a["b"], {"boolValue": True})
        self.assertEqual(a["t"], {"stringValue": "x"})
        self.assertEqual(a["ints"]["arrayValue"]["values"], [{"intValue": "1"}, {"intValue": "2"}])
        self.assertEqual(a["strs"]["arrayValue"]["values"], [{"stringValue": "a"}, {"stringValue": "b"}])
        self.assertEqual(a["big"], {"stringValue": str(2**70)})
        self.assertTrue(a["other"]["stringValue"].startswith("<object object"))
        self.assertEqual(a["late"], {"intValue": "7"})

    def test_nesting_follows_the_with_blocks(self):
        with lens.managed_span("outer", "job") as outer:
            self.assertEqual(lens.current_span_context().span_id, outer.context.span_id)
            with lens.managed_span("inner", "step"):
                pass
        self.assertIsNone(lens.current_span_context())
        spans = {s["name"]: s for s in self.finish()}
        self.assertEqual(spans["inner"]["parentSpanId"], spans["outer"]["spanId"])
        self.assertEqual(spans["inner"]["traceId"], spans["outer"]["traceId"])

    def test_an_escaping_exception_is_recorded_and_propagates(self):
        with self.assertRaises(KeyError):
            with lens.managed_span("failing", "step"):
                raise KeyError("no such microbatch")
        (s,) = self.finish()
        self.assertEqual(s["status"]["code"], 2)
        (event,) = s["events"]
        self.assertEqual(event["name"], "exception")
        attrs = {a["key"]: a["value"]["stringValue"] for a in event["attributes"]}
        self.assertEqual(attrs["exception.type"], "KeyError")
        self.assertIn("no such microbatch", attrs["exception.message"])

    def test_unknown_group_and_bad_status_are_errors(self):
        with self.assertRaises(ValueError):
            lens.managed_span("x", "no_such_group")
        with lens.managed_span("x", "step") as s:
            with self.assertRaises(ValueError):
                s.set_status("fine")

    def test_cxx_spans_share_the_telemetry_and_the_current_span(self):
        with lens.managed_span("python.parent", "job") as parent:
            traceparent = lens_cxx_probe.emit_span("cxx.child")
        self.assertIn(parent.context.trace_id, traceparent)
        spans = {s["name"]: s for s in self.finish()}
        self.assertEqual(spans["cxx.child"]["parentSpanId"], spans["python.parent"]["spanId"])
        self.assertEqual(spans["cxx.child"]["scope"], "cxx.probe")


class Groups(Traced):
    groups = "step"

    def test_a_group_that_is_off_gives_the_shared_no_op(self):
        off = lens.managed_span("fwd", "forward_backward", x=1)
        self.assertIs(off, lens.managed_span("other", "layer"))
        with off as s:
            s.set_attribute("ignored", 1)
            s.add_event("ignored")
        self.assertFalse(off.recording)
        self.assertIs(lens.distributed.create_linked_span("l", remote_carrier=None), off)
        with lens.managed_span("kept", "step"):
            pass
        self.assertEqual([s["name"] for s in self.finish()], ["kept"])

    def test_set_span_groups_switches_at_run_time(self):
        lens.set_span_groups("per_step,microbatch")
        self.assertTrue(lens.get_telemetry().enabled("microbatch"))
        with lens.managed_span("mb", "microbatch"):
            pass
        with self.assertRaises(lens.ConfigError):
            lens.set_span_groups("nope")
        self.assertEqual([s["name"] for s in self.finish()], ["mb"])


class StartupRecords(unittest.TestCase):
    """lens.distributed.init moves start-up records; C++ compares them."""

    def test_records_that_agree_give_rank_zeros_run_id(self):
        first, error = lens._lens.startup_record(2, enabled=True, run_id="run-a")
        self.assertEqual(error, "")
        second, _ = lens._lens.startup_record(2, enabled=True, run_id="run-b")
        run_id, run_key = lens._lens.compare_startup_records(1, [first, second])
        self.assertEqual(run_id, "run-a")
        self.assertIsInstance(run_key, int)

    def test_a_different_pipeline_size_fails_naming_the_setting_and_rank(self):
        records = [lens._lens.startup_record(size, enabled=True)[0] for size in (4, 4, 2)]
        with self.assertRaises(lens.ConfigError) as caught:
            lens._lens.compare_startup_records(0, records)
        self.assertIn("pipeline-parallel size differs", str(caught.exception))
        self.assertIn("rank(s) 2", str(caught.exception))

    def test_a_rank_whose_configuration_does_not_resolve_fails_the_others(self):
        good, _ = lens._lens.startup_record(2, enabled=True)
        bad, error = lens._lens.startup_record(2, enabled=True, span_groups="bogus")
        self.assertIn("bogus", error)
        with self.assertRaises(lens.ConfigError) as caught:
            lens._lens.compare_startup_records(0, [good, bad])
        self.assertIn("rank(s) 1 could not read", str(caught.exception))

    def test_a_rank_whose_telemetry_did_not_start_fails_the_others(self):
        lens._lens.compare_telemetry_start(0, [False, False])
        with self.assertRaises(lens.ConfigError) as caught:
            lens._lens.compare_telemetry_start(0, [False, False, True])
        self.assertIn("rank(s) 2 could not start their telemetry", str(caught.exception))

    def test_every_job_wide_keyword_reaches_the_record(self):
        # Each job-wide setting lens.init takes is compared by the record
        # Python sends; a mismatch names the setting's variable.
        rows = [r for r in lens.settings() if r["job_wide"] and r["option"]]
        self.assertGreaterEqual(len(rows), 14)
        checked = 0
        for row in rows:
            if row["kind"] == "flag":
                values = (True, False)
            elif row["kind"] == "count":
                low = int(row["accepted"].split(" to ")[0])
                values = (low, low + 1)
            elif row["kind"] == "choice":
                values = tuple(row["accepted"].split(", ")[:2])
            elif row["option"] == "span_groups":
                values = ("all", "default")
            else:
                continue
            base = {"enabled": True, "tail_selection": True}
            records = []
            for value in values:
                record, error = lens._lens.startup_record(2, **dict(base, **{row["option"]: value}))
                self.assertEqual(error, "", row["option"])
                records.append(record)
            with self.assertRaises(lens.ConfigError) as caught:
                lens._lens.compare_startup_records(0, records)
            self.assertIn(f"{row['variables'][0]} differs", str(caught.exception), row["option"])
            checked += 1
        self.assertGreaterEqual(checked, 14)

    def test_distributed_init_needs_the_pipeline_size(self):
        with self.assertRaises(lens.ConfigError) as caught:
            lens.distributed.init(enabled=True)
        self.assertIn("needs pipeline_parallel_size", str(caught.exception))

    def test_torn_records_are_refused(self):
        good, _ = lens._lens.startup_record(2, enabled=True)
        with self.assertRaises(lens.ConfigError):
            lens._lens.compare_startup_records(0, [good, good[:10]])


class StepCarrier(Traced):
    def test_step_span_joins_the_reserved_context_once(self):
        reserved = lens._lens.reserve_step_carrier(5)
        frame = lens._lens.encode_carrier(reserved)
        self.assertEqual(len(frame), lens._lens.FRAME_BYTES)
        source = lens._lens.accept_carrier_frame(frame, expected_step=5, reserved_here=True)
        self.assertEqual((source.trace_id, source.span_id, source.step),
                         (reserved.trace_id, reserved.span_id, 5))
        lens.state.set_pp_trace_carrier(source)
        self.assertEqual(lens_cxx_probe.carrier_trace_id(), reserved.trace_id)
        with lens.managed_span("megatron.train_step", "step") as step:
            self.assertEqual(step.context.span_id, reserved.span_id)
            link = lens.distributed.create_linked_span("linked", remote_carrier=source, **{"dl.microbatch_id": 0})
            link.end()
        with lens.managed_span("megatron.train_step", "step") as second:
            self.assertNotEqual(second.context.trace_id, reserved.trace_id)
        spans = self.finish()
        step_span = next(s for s in spans if s["spanId"] == reserved.span_id)
        self.assertEqual(step_span["traceId"], reserved.trace_id)
        self.assertNotIn("parentSpanId", {k for k, v in step_span.items() if v})
        linked = next(s for s in spans if s["name"] == "linked")
        self.assertEqual(linked["parentSpanId"], reserved.span_id)
        self.assertEqual(linked["links"][0]["spanId"], reserved.span_id)

    def test_a_receiver_joins_the_trace_with_its_own_span_id(self):
        remote = lens._lens.accept_carrier_frame(
            lens._lens.encode_carrier(lens._lens.reserve_step_carrier(1)), expected_step=1)
        self.assertFalse(remote.reserved_here)
        lens.state.set_pp_trace_carrier(remote)
        with lens.managed_span("megatron.train_step", "step") as step:
            self.assertEqual(step.context.trace_id, remote.trace_id)
            self.assertNotEqual(step.context.span_id, remote.span_id)
        lens.state.set_pp_trace_carrier(None)
        self.assertIsNone(lens.state.get_pp_trace_carrier())

    def test_a_repeated_tracestate_key_keeps_its_first_member(self):
        ctx = lens.SpanContext.from_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "foo=1,bar=2,foo=2")
        self.assertEqual(ctx.tracestate, "foo=1,bar=2")
        same = lens.SpanContext.from_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "foo=1,foo=1")
        self.assertEqual(same.tracestate, "foo=1")

    def test_malformed_frames_give_no_context_and_are_counted(self):
        before = lens._lens.pipeline_stats()["frames_malformed"]
        good = lens._lens.encode_carrier(lens._lens.reserve_step_carrier(2))
        bad_frames = [b"", b"\x00" * 10, good[:-1], good + b"\x00",
                      bytes([good[0] ^ 0xFF]) + good[1:],           # magic
                      good[:40] + bytes([good[40] ^ 0x01]) + good[41:]]  # inside the checksummed ids
        for frame in bad_frames:
            self.assertIsNone(lens._lens.accept_carrier_frame(frame), frame[:8])
        self.assertEqual(lens._lens.pipeline_stats()["frames_malformed"] - before, len(bad_frames))
        self.assertIsNone(lens._lens.accept_carrier_frame(lens._lens.encode_carrier(None)))



class SourceGroup:
    """A two-rank group as lens's core calls it, seen from rank 0 (the
    source): a broadcast returns the source's bytes, as every rank would
    receive them; ``reply`` replaces what a call returns (a wrong size, not
    bytes) and ``fail`` makes it raise, as a broken torch group does."""

    rank, size, engine = 0, 2, "test"

    def __init__(self, reply=None, fail=None):
        self.calls, self.reply, self.fail = [], reply, fail

    def _answer(self, name, data):
        self.calls.append((name, len(data)))
        if self.fail is not None:
            raise self.fail
        return data if self.reply is None else self.reply

    def broadcast(self, data, root, timeout):
        return self._answer("broadcast", data)

    def all_gather(self, data, timeout):
        return self._answer("all_gather", data * self.size)


class StepProtocol(Traced):
    """lens.distributed's StepTrace is the C++ StepTrace over a Python group:
    the broadcast, the failures and the step span are the core's."""

    def setUp(self):
        self.clock = os.environ.get("LENS_CLOCK_SYNC")
        os.environ["LENS_CLOCK_SYNC"] = "off"  # no peer answers a clock exchange here
        super().setUp()

    def tearDown(self):
        super().tearDown()
        if self.clock is None:
            del os.environ["LENS_CLOCK_SYNC"]
        else:
            os.environ["LENS_CLOCK_SYNC"] = self.clock

    def test_each_step_is_one_broadcast_and_its_span_the_sources(self):
        group = SourceGroup()
        trace = lens._lens.StepTrace(group, None, 2)
        self.assertTrue(trace.gated)
        contexts = []
        for step in (7, 8):
            with trace.step(step) as scope:
                scope.set_attribute("dl.num_microbatches", 4)
                self.assertEqual(scope.carrier.step, step)
                self.assertEqual(scope.carrier.span_id, scope.context.span_id)
            contexts.append(scope.context)
        trace.finish()
        self.assertEqual(group.calls, [("broadcast", lens._lens.FRAME_BYTES)] * 2)
        self.assertNotEqual(contexts[0].trace_id, contexts[1].trace_id)
        steps = {s["attrs"]["dl.step"]["intValue"]: s for s in self.finish()
                 if s["name"] == "megatron.train_step"}
        self.assertEqual(sorted(steps), ["7", "8"])
        self.assertEqual(steps["7"]["traceId"], contexts[0].trace_id)
        self.assertEqual(steps["7"]["attrs"]["dl.num_microbatches"], {"intValue": "4"})

    def test_a_reply_of_the_wrong_size_or_type_is_a_comm_error(self):
        for reply, said in ((b"\x00" * 10, "10 bytes, 256 expected"), ("text", "did not return bytes")):
            trace = lens._lens.StepTrace(SourceGroup(reply=reply), None, 2)
            with self.assertRaises(lens.CommError) as caught:
                with trace.step(0):
                    self.fail("the step must not open")
            self.assertIn(said, str(caught.exception))

    def test_a_group_that_raises_fails_the_step_naming_the_call(self):
        trace = lens._lens.StepTrace(SourceGroup(fail=RuntimeError("peer 1 is gone")), None, 2)
        with self.assertRaises(lens.CommError) as caught:
            with trace.step(3):
                pass
        self.assertIn("broadcast", str(caught.exception))
        self.assertIn("peer 1 is gone", str(caught.exception))
        self.assertIsInstance(caught.exception, RuntimeError)

    def test_one_stage_runs_no_collective(self):
        group = SourceGroup(fail=AssertionError("no call expected"))
        trace = lens._lens.StepTrace(group, None, 1)
        self.assertFalse(trace.gated)
        with trace.step(0) as scope:
            self.assertIsNone(scope.carrier)
        self.assertEqual(group.calls, [])

    def test_a_trace_outlived_by_its_telemetry_refuses_steps(self):
        trace = lens._lens.StepTrace(SourceGroup(), None, 2)
        lens.shutdown()
        with self.assertRaises(RuntimeError) as caught:
            trace.step(0).__enter__()
        self.assertIn("shut down or replaced", str(caught.exception))

    def test_a_group_whose_rank_is_outside_it_is_refused(self):
        group = SourceGroup()
        group.rank = 2
        with self.assertRaises(lens.ConfigError):
            lens._lens.StepTrace(group, None, 2)

    def test_a_clock_sample_over_a_broken_group_fails_naming_the_call_and_keeps_no_group(self):
        import gc
        import weakref

        class Gone(SourceGroup):
            def send(self, data, peer, tag, timeout):
                raise RuntimeError("peer 1 is gone")

            recv = send

        group = Gone()
        held = weakref.ref(group)
        with self.assertRaises(lens.CommError) as caught:
            lens._lens.sync_clocks(group, 0)
        self.assertIn("send failed", str(caught.exception))
        self.assertIn("peer 1 is gone", str(caught.exception))
        del group, caught
        gc.collect()
        self.assertIsNone(held(), "the module's clock engine lends the group for one sample only")

    def test_the_meeting_names_a_peer_three_times_slower_on_the_step_span(self):
        class SlowPeer(SourceGroup):
            def all_gather(self, data, timeout):  # rank 1: the same words, 3x the median
                self.calls.append(("all_gather", len(data)))
                (median,) = struct.unpack_from("<d", data)
                return data + struct.pack("<d", 3 * median) + data[8:]

        world = SlowPeer()
        meeting = lens._lens.StepMeeting(world, live_every=2, ranks=[(0, 0, 0, 0), (1, 0, 1, 0)])
        trace = lens._lens.StepTrace(SourceGroup(), None, 1)
        verdicts = []
        for step in range(4):
            with trace.step(step) as scope:
                if meeting.step_done(step, 10.0, 0.02):
                    verdicts.append(meeting.meet(step, scope))
        self.assertIsNone(meeting.finish(3))  # nothing held: no last meeting
        self.assertEqual(len(world.calls), 2)
        # Named when it becomes a straggler, not again while it stays as slow.
        self.assertEqual([[n["rank"] for n in v["stragglers"]] for v in verdicts], [[1], []])
        self.assertAlmostEqual(verdicts[0]["stragglers"][0]["factor"], 3.0)
        self.assertEqual(verdicts[1]["scores"], [1.0, 3.0])
        events = [e for s in self.finish() if s["name"] == "megatron.train_step"
                  for e in s.get("events", []) if e["name"] == "lens.straggler"]
        self.assertEqual([e["attributes"][0]["value"] for e in events], [{"intValue": "1"}])

class Configuration(unittest.TestCase):
    def test_disabled_telemetry_is_none_and_spans_cost_nothing(self):
        self.assertIsNone(lens.init(enabled=False))
        self.assertIsNone(lens.get_telemetry())
        self.assertFalse(lens.managed_span("s", "step").recording)
        self.assertEqual(lens_cxx_probe.emit_span("x"), "")

    def test_a_bad_setting_is_a_config_error_naming_it(self):
        os.environ["MEGATRON_OTEL_SPAN_GROUPS"] = "per_step,bogus"
        try:
            with self.assertRaises(lens.ConfigError) as caught:
                lens.init(enabled=True, exporter="none")
            self.assertIn("MEGATRON_OTEL_SPAN_GROUPS", str(caught.exception))
            self.assertIn("bogus", str(caught.exception))
            self.assertIsInstance(caught.exception, ValueError)
            self.assertIsNone(lens.get_telemetry())
        finally:
            del os.environ["MEGATRON_OTEL_SPAN_GROUPS"]

    def test_init_takes_the_settings_tables_keywords(self):
        directory = tempfile.mkdtemp(prefix="lens-py-settings-")
        lens.init(enabled=True, exporter="none", trace_dir=directory, tail_selection=True,
                  tail_keep=3, step_verify_steps=7, collective_timeout=2.5,
                  trace_scope="pipeline", max_queue_size=4096, export_filter="tp=0")
        try:
            shown = lens._lens.config()
            self.assertEqual(shown["tail_keep"], 3)
            self.assertEqual(shown["step_verify_steps"], 7)
            self.assertEqual(shown["collective_timeout"], 2.5)
            self.assertEqual(shown["trace_scope"], "pipeline")
            self.assertEqual(shown["max_queue_size"], 4096)
            self.assertEqual(shown["export_filter"], "tp=0")
            self.assertEqual(shown["trace_dir"], directory)
            self.assertTrue(shown["tail_selection"])
        finally:
            lens.shutdown()
        with self.assertRaises(TypeError) as caught:
            lens.init(enabled=True, exporter="none", tail_kept=3)
        self.assertIn("'tail_kept'", str(caught.exception))
        self.assertIn("tail_keep", str(caught.exception))
        for bad in ({"tail_keep": 0}, {"tail_keep": "3"}, {"clock_sync": 1},
                    {"trace_scope": "galaxy"}, {"collective_timeout": -1.0}):
            with self.assertRaises(lens.ConfigError) as caught:
                lens.init(enabled=True, exporter="none", **bad)
            self.assertTrue(str(caught.exception).startswith(f"{next(iter(bad))}="),
                            str(caught.exception))
        self.assertIsNone(lens.get_telemetry())
        names = {r["option"] for r in lens.settings()}
        self.assertLessEqual({"tail_keep", "step_context", "enabled", "collective_timeout"}, names)

    def test_export_filter_leaves_a_rank_out_by_its_coordinates(self):
        os.environ["LENS_EXPORT_FILTER"] = "dp=0"
        try:
            kept = lens.init(enabled=True, exporter="none", span_groups="all", coordinates=(1, 0, 0))
            self.assertTrue(kept.enabled("step"))
            out = lens.init(enabled=True, exporter="none", span_groups="all", coordinates=(1, 1, 0))
            self.assertIsNotNone(out, "a filtered rank keeps its telemetry: the gate stays uniform")
            self.assertFalse(out.enabled("step"))
            self.assertFalse(lens.managed_span("s", "step").recording)
            carrier = lens._lens.reserve_step_carrier(0)   # still able to be a source
            self.assertTrue(carrier.reserved_here)
        finally:
            del os.environ["LENS_EXPORT_FILTER"]
            lens.shutdown()

    def test_pipeline_scope_links_a_replicas_step_to_global_rank_zero(self):
        os.environ["LENS_TRACE_SCOPE"] = "pipeline"
        directory = tempfile.mkdtemp(prefix="lens-py-scope-")
        common = dict(enabled=True, exporter="file", trace_dir=directory, run_id="r",
                      span_groups="all", world_size=4, run_key=77)
        def traced_step(rank):
            """Rank `rank` as its replica's source of step 3: (anchor, carrier, step span)."""
            t = lens.init(rank=rank, **common)
            anchor = lens._lens.anchor_step_context(3)
            carrier = lens._lens.reserve_step_carrier(3)
            lens.state.set_pp_trace_carrier(carrier)
            with lens.managed_span("megatron.train_step", "step"):
                pass
            path = t.trace_file
            lens.shutdown()
            (step,) = spans_of(path)
            return anchor, carrier, step

        try:
            # Global rank 0 reserves the anchor itself; its step span has no link.
            anchor, source, step0 = traced_step(0)
            self.assertEqual((source.trace_id, source.span_id), (anchor.trace_id, anchor.span_id))
            self.assertEqual(step0["spanId"], anchor.span_id)
            self.assertEqual(step0["links"], [])
            # Another replica's first stage (global rank 2): its own trace,
            # linked to the anchor, which it derives from the same run key.
            anchor2, other, step2 = traced_step(2)
            self.assertEqual(anchor2.span_id, anchor.span_id)
            self.assertNotEqual(other.trace_id, anchor.trace_id)
            self.assertEqual(step2["traceId"], other.trace_id)
            (link,) = step2["links"]
            self.assertEqual((link["traceId"], link["spanId"]), (anchor.trace_id, anchor.span_id))
        finally:
            del os.environ["LENS_TRACE_SCOPE"]
            lens.shutdown()

    def test_every_new_telemetry_records_through_a_tracer_of_its_own(self):
        # Each init may land its telemetry where the last one was freed; the
        # module's cached tracer must follow the new one, never the old.
        for i in range(6):
            directory = tempfile.mkdtemp(prefix="lens-py-reinit-")
            t = lens.init(enabled=True, exporter="file", trace_dir=directory, run_id=f"r{i}",
                          span_groups="all")
            with lens.managed_span(f"span-{i}", "step"):
                pass
            path = t.trace_file
            lens.shutdown()
            self.assertEqual([s["name"] for s in spans_of(path)], [f"span-{i}"])

    def test_bad_timeouts_are_rejected(self):
        with self.assertRaises(ValueError):
            lens.flush(-1)
        with self.assertRaises(ValueError):
            lens.init(enabled=True, exporter="none", collective_timeout=float("nan"))
        lens.shutdown()


class LiveMetrics(Traced):
    """The metrics registry, its endpoint and the live straggler rule from Python."""

    def test_a_step_histogram_with_the_step_spans_exemplar_served_over_http(self):
        import urllib.request
        registry = lens.MetricRegistry()
        step = registry.histogram("lens_step_duration_seconds", "Step time.", "seconds",
                                  [0.01, 0.1, 1], [("rank", "0")])
        steps = registry.counter("lens_steps", "Steps.", [("rank", "0")])
        with lens.managed_span("megatron.train_step", "step") as span:
            pass
        step.record(0.05, span.context)
        step.record(0.5)  # outside a trace: counted, no exemplar
        steps.add()
        self.assertEqual(step.count, 2)
        endpoint = lens.MetricsEndpoint(registry, "127.0.0.1", 0)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/metrics", timeout=10) as r:
                self.assertTrue(r.headers["Content-Type"].startswith("application/openmetrics-text"))
                text = r.read().decode()
        finally:
            endpoint.stop()
        ctx = span.context
        self.assertIn(f'lens_step_duration_seconds_bucket{{rank="0",le="0.1"}} 1 # '
                      f'{{trace_id="{ctx.trace_id}",span_id="{ctx.span_id}"}} 0.05 ', text)
        self.assertIn('lens_step_duration_seconds_bucket{rank="0",le="1"} 2\n', text)
        self.assertIn('lens_steps_total{rank="0"} 1\n', text)
        self.assertTrue(text.endswith("# EOF\n"))
        with self.assertRaises(ValueError):
            registry.gauge("bad-name")

    def test_the_live_rule_names_a_slow_rank_against_its_stage(self):
        rule = lens.LiveStragglerRule([(0, 0, 0, 0), (1, 0, 1, 0), (2, 1, 0, 0), (3, 1, 1, 0)])
        self.assertEqual(rule.observe(9, [10, 10, 12, 12]), [])
        (named,) = rule.observe(19, [10, 10, 12, 48])
        self.assertEqual((named["rank"], named["stage"], named["replica"]), (3, 1, 1))
        self.assertAlmostEqual(named["factor"], 4.0)
        self.assertIn("rank 3 (stage 1, replica 1, tensor rank 0) is a straggler at step 19", named["line"])
        self.assertAlmostEqual(rule.score(3), 4.0)


class StepFigures(Traced):
    """Spans time their step figures, recorded or not; a rank's step metrics."""

    groups = "step"  # microbatch, communication and optimizer are off

    def tearDown(self):
        lens.set_step_figures(False)
        lens.take_step_figures()
        super().tearDown()

    def test_spans_of_groups_that_are_off_still_time_their_figures(self):
        import time
        lens.take_step_figures()
        with lens.managed_span("megatron.microbatch.forward", "microbatch"):
            pass
        self.assertEqual(lens.take_step_figures()["compute"]["spans"], 0, "off by default")
        lens.set_step_figures(True)
        with lens.managed_span("megatron.train_step", "step") as step:
            with lens.managed_span("megatron.microbatch.forward", "microbatch") as fwd:
                self.assertFalse(fwd.recording)
                time.sleep(0.02)
            with lens.managed_span("megatron.p2p.recv_forward", "communication", figure="p2p_wait"):
                pass
            with lens.managed_span("megatron.tp.all_reduce", "communication"):
                pass  # names no figure: counts nowhere
            with lens.managed_span("megatron.optimizer.step", "optimizer"):
                pass
        figures = lens.take_step_figures()
        self.assertGreaterEqual(figures["compute"]["seconds"], 0.02)
        self.assertEqual(figures["compute"]["spans"], 1)
        self.assertEqual(figures["p2p_wait"]["spans"], 1)
        self.assertEqual(figures["optimizer"]["spans"], 1)
        self.assertEqual(figures["all_reduce"]["spans"], 0)
        self.assertEqual(figures["p2p_send"]["spans"], 0)
        with self.assertRaises(ValueError):
            lens.managed_span("x", "communication", figure="waiting")

        registry = lens.MetricRegistry()
        metrics = lens.StepMetrics(registry, [("rank", "0")])
        metrics.record_step(0.05, figures, step.context)
        text = registry.openmetrics()
        self.assertIn('lens_step_compute_seconds_count{rank="0"} 1\n', text)
        self.assertIn('lens_step_p2p_wait_seconds_count{rank="0"} 1\n', text)
        self.assertIn('lens_step_all_reduce_seconds_count{rank="0"} 0\n', text)
        self.assertIn(f'trace_id="{step.context.trace_id}"', text)
        self.assertIn('lens_steps_total{rank="0"} 1\n', text)

    def test_a_recorded_span_times_the_figure_its_start_names(self):
        lens.set_step_figures(True)
        lens.set_span_groups("step,communication")
        lens.take_step_figures()
        with lens.managed_span("megatron.grads.all_reduce", "communication", figure="all_reduce") as s:
            self.assertTrue(s.recording)
        self.assertEqual(lens.take_step_figures()["all_reduce"]["spans"], 1)

    def test_the_tail_selector_and_no_hold_unless_asked(self):
        selector = lens.TailSelector(keep=1, baseline_percent=0, run_key=5)
        choice = selector.choose([10, 11, 12], [[0.1, 0.4, 0.2], [0.1, 0.1, 0.3]])
        self.assertEqual(choice["keep"], [11])
        self.assertEqual(choice["drop"], [10, 12])
        self.assertEqual(choice["kept"][0][:2], (11, "slowest"))
        self.assertFalse(lens.holds_steps())
        self.assertNotIn("hold", self.telemetry.stats())
        with lens.managed_span("megatron.train_step", "step") as step:
            lens.hold_step(0, step.context)  # not holding: nothing happens
        lens.settle_steps([0], [])
        self.assertEqual(self.telemetry.stats()["not_selected"], 0)

    def test_no_exporter_unless_the_environment_asks(self):
        self.assertIsNone(lens.metrics_exporter_from_environment(lens.MetricRegistry()))


if __name__ == "__main__":
    unittest.main()
