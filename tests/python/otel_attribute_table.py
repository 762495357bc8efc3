"""Every kind of attribute key and value through lens.otel's paths and the
OpenTelemetry SDK, in one process: prints a JSON document of what each kept.

    OTEL_PYTHON_TRACER_PROVIDER=lens LENS_TRACE_DIR=D MEGATRON_OTEL_RUN_ID=table \\
        python otel_attribute_table.py

Cases are (key, value) pairs; each is given to lens three ways (the C start
path: start_as_current_span's attributes; the general start path:
start_span's; set_attribute after the start) and to the SDK twice (start
attributes, set_attribute). Nothing may raise. The document maps each case's
index to {"sdk_start", "sdk_set"} (what the SDK kept, as JSON) and
{"errors"} (what raised, expected empty); lens's spans are read from its
file by the test.
"""

import enum
import json
import sys
import types

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class Color(enum.IntEnum):
    RED = 3


class NoStr:
    __slots__ = ()


CASES = [
    ("k.str", "v"), ("k.int", 7), ("k.float", 2.5), ("k.bool", True), ("k.neg", -3),
    ("k.big", 2 ** 64), ("k.none", None), ("k.list_int", [1, 2, 3]), ("k.tuple_str", ("a", "b")),
    ("k.list_bool", [True, False]), ("k.list_mixed", [1, "a"]), ("k.list_none", [1, None]),
    ("k.empty_list", []), ("k.dict", {"a": 1}), ("k.bytes", b"xy"), ("k.enum", Color.RED),
    ("k.surrogate", "file\udcff.txt"), ("k.object", NoStr()), ("k.set", {1, 2}),
    (5, "int key"), (None, "none key"), ("", "empty key"), ("k.\udcfe", "surrogate key"),
]


def text(s):
    """A str as JSON takes it: a lone surrogate as U+FFFD."""
    return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in s)


def jsonable(value):
    if isinstance(value, (tuple, list)):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, str):
        return text(value)
    return value


def main():
    lens_tracer = trace.get_tracer("table")
    sdk = TracerProvider()
    memory = InMemorySpanExporter()
    sdk.add_span_processor(SimpleSpanProcessor(memory))
    sdk_tracer = sdk.get_tracer("table")
    out, errors = {}, []
    for i, (key, value) in enumerate(CASES):
        attributes = {key: value}
        for how, start in (("c", lambda n: lens_tracer.start_as_current_span(n, attributes=attributes)),
                           ("general", lambda n: lens_tracer.start_span(n, attributes=attributes))):
            try:
                with start(f"case{i}.{how}"):
                    pass
            except Exception as error:
                errors.append(f"case {i} lens {how}: {error!r}")
        try:
            with lens_tracer.start_as_current_span(f"case{i}.set") as span:
                span.set_attribute(key, value)
                span.set_attributes(types.MappingProxyType({key: value}))
        except Exception as error:
            errors.append(f"case {i} lens set: {error!r}")
        with sdk_tracer.start_as_current_span(f"case{i}.start", attributes=attributes):
            pass
        with sdk_tracer.start_as_current_span(f"case{i}.set") as span:
            span.set_attribute(key, value)
    # Mappings that are not dicts, on both start paths.
    for n, mapping in (("proxy", types.MappingProxyType({"m.k": 1})),
                       ("bounded", BoundedAttributes(attributes={"m.k": 1}))):
        for how, start in (("c", lambda: lens_tracer.start_as_current_span(f"map.{n}.c",
                                                                            attributes=mapping)),
                           ("general", lambda: lens_tracer.start_span(f"map.{n}.general",
                                                                      attributes=mapping))):
            try:
                with start():
                    pass
            except Exception as error:
                errors.append(f"mapping {n} {how}: {error!r}")
    # Names, times and step numbers a careless caller passes.
    for label, call in (
            ("name None", lambda: lens_tracer.start_span(None).end()),
            ("name surrogate", lambda: lens_tracer.start_span("n\udcff").end()),
            ("float start time", lambda: lens_tracer.start_span("float.start",
                                                                start_time=1.7e18).end()),
            ("update_name surrogate", lambda: lens_tracer.start_span("u").update_name("u\udcff")),
            ("event surrogate", lambda: lens_tracer.start_span("e").add_event("e\udcff",
                                                                              {"a\udcff": "b"})),
            ("iteration abc", lambda: lens_tracer.start_span(
                "megatron.train.iteration", attributes={"megatron.iteration": "abc"}).end()),
            ("iteration -1", lambda: lens_tracer.start_span(
                "megatron.train.iteration", attributes={"megatron.iteration": -1}).end()),
            ("iteration 2**64", lambda: lens_tracer.start_span(
                "megatron.train.iteration", attributes={"megatron.iteration": 2 ** 64}).end())):
        try:
            call()
        except Exception as error:
            errors.append(f"{label}: {error!r}")
    for span in memory.get_finished_spans():
        case, how = span.name.split(".", 1)
        out.setdefault(case[4:], {})[f"sdk_{how}"] = {text(k): jsonable(v)
                                                       for k, v in span.attributes.items()}
    trace.get_tracer_provider().shutdown()
    json.dump({"cases": out, "errors": errors}, sys.stdout)


if __name__ == "__main__":
    main()
