"""managed_span(..., stream=...) times a span on the device: run against the
simulated CUDA runtime (tests/device/simulated_cuda_runtime.cc) named in
LENS_CUDA_RUNTIME, as a user would name theirs, and driven through ctypes."""

import ctypes
import os
import tempfile
import time
import unittest

import lens
from test_package import spans_of


class FakeStream:
    """What torch.cuda.Stream gives lens: its handle as ``cuda_stream``."""

    def __init__(self, handle):
        self.cuda_stream = handle


class DeviceSpans(unittest.TestCase):
    def setUp(self):
        self.sim = ctypes.CDLL(os.environ["LENS_CUDA_RUNTIME"])
        self.sim.lens_sim_reset(ctypes.c_int64(0), ctypes.c_double(0))
        self.dir = tempfile.mkdtemp(prefix="lens-py-device-")
        self.telemetry = lens.init(enabled=True, exporter="file", trace_dir=self.dir,
                                   span_groups="all", rank=0, world_size=1)
        self.path = self.telemetry.trace_file

    def tearDown(self):
        lens.shutdown()

    def launch(self, stream, ns):
        self.sim.lens_sim_launch(ctypes.c_void_p(stream), ctypes.c_int64(ns))

    def test_a_span_on_a_stream_has_the_devices_times_and_keeps_the_launchs(self):
        stream = FakeStream(0x51)
        self.launch(stream.cuda_stream, 20_000_000)  # the device is 20 ms behind
        with lens.managed_span("forward", "forward_backward", stream=stream, **{"dl.step": 1}):
            self.launch(stream.cuda_stream, 4_000_000)  # 4 ms of work
        with lens.managed_span("host", "forward_backward"):
            pass
        for _ in range(2000):
            device = self.telemetry.stats().get("device", {})
            if device.get("resolved", 0) >= 1:
                break
            time.sleep(0.01)
        self.assertEqual(device["timed"], 1)
        self.assertEqual(device["resolved"], 1)
        self.assertIn("LENS_CUDA_RUNTIME=", device["runtime"])
        self.assertTrue(lens.shutdown())
        spans = {s["name"]: s for s in spans_of(self.path)}
        forward = spans["forward"]
        start, end = int(forward["startTimeUnixNano"]), int(forward["endTimeUnixNano"])
        self.assertAlmostEqual(end - start, 4_000_000, delta=1_000)  # the device's, to the us
        host_start = int(forward["attrs"]["lens.host.start_unix_ns"]["intValue"])
        self.assertGreater(start - host_start, 15_000_000)  # run 20 ms after its launch
        self.assertEqual(forward["attrs"]["dl.step"], {"intValue": "1"})
        self.assertNotIn("lens.host.start_unix_ns", spans["host"]["attrs"])

    def test_a_raw_handle_works_and_a_bad_stream_is_an_error(self):
        with lens.managed_span("raw", "forward_backward", stream=0x52):
            pass
        with self.assertRaisesRegex(TypeError, "stream= takes a torch.cuda.Stream"):
            lens.managed_span("bad", "forward_backward", stream="s0")
        with self.assertRaisesRegex(ValueError, "an int >= 0"):
            lens.managed_span("bad", "forward_backward", stream=-1)


if __name__ == "__main__":
    unittest.main()
