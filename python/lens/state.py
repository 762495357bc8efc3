"""Per-process pipeline state: the current step's trace carrier.

set_pp_trace_carrier stores the carrier in the same slot C++ code of the
process reads (lens/carrier_slot.h), so receive sites instrumented in C++ and
in Python see the same step. The carrier set last is also the one the next
``step``-group managed_span joins.
"""

import threading

from . import _lens

_lock = threading.Lock()
_pending = None


def set_pp_trace_carrier(carrier):
    """Stores this step's carrier (a lens.Carrier, or None to clear it)."""
    global _pending
    with _lock:
        _lens.set_pp_trace_carrier(carrier)
        _pending = carrier


def get_pp_trace_carrier():
    """The current step's carrier, or None."""
    return _lens.get_pp_trace_carrier()


def _take_step_carrier():
    """The carrier the next step span joins, once: a second step span of the
    same step must not reuse the source's reserved span id."""
    global _pending
    with _lock:
        carrier, _pending = _pending, None
    return carrier
