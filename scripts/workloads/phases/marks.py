"""Shared by the phase workloads: each phase the script itself times, one JSON line each,
in the trace's clock (CLOCK_REALTIME ns): {"mark": kind, "start": ns, "end": ns}."""
import json, time
from contextlib import contextmanager


@contextmanager
def mark(kind):
    a = time.time_ns()
    try:
        yield
    finally:
        print(json.dumps({"mark": kind, "start": a, "end": time.time_ns()}), flush=True)


def note(kind, start, end):
    print(json.dumps({"mark": kind, "start": start, "end": end}), flush=True)
