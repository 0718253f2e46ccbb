"""How long the suite waits: every deadline is a generous base times `SCALE`.

Tests assert orderings and counts. A duration appears only as a bound on how long to wait
for something that should happen (a server's start-up, an answer, a wake-up), and a loaded
machine makes all of those slower at once, so every such bound is `scaled()`.

`SCALE` (>= 1) comes from the environment variable `TEST_TIMEOUT_SCALE` when it is set;
else it is measured: 1 per CPU-bound process per core beyond the first (the 1-minute load
average over the core count, at least 1, at most 4), doubled under `CI=true` (shared
runners). The suite's controller measures it once (`conftest.py`) and puts it in the
environment, so its xdist workers and every child server agree on one value.
"""

from __future__ import annotations

import os

ENV = "TEST_TIMEOUT_SCALE"
MAX_MEASURED = 4.0


def measure() -> float:
    """The scale this machine calls for now (see the module docstring)."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # not on every platform
        load = 0.0
    busy = min(max(load / (os.cpu_count() or 1), 1.0), MAX_MEASURED)
    return busy * (2.0 if os.environ.get("CI") == "true" else 1.0)


def from_environment() -> float:
    """`TEST_TIMEOUT_SCALE` if set, else `measure()`."""
    raw = os.environ.get(ENV)
    if raw:
        try:
            value = float(raw)
        except ValueError:
            raise RuntimeError(f"{ENV}={raw!r} is not a number") from None
        return max(value, 1.0)
    return measure()


SCALE = from_environment()
"""How much longer than on a quiet machine the suite waits for anything."""


def scaled(seconds: float) -> float:
    """`seconds` (a generous bound on a quiet machine) stretched for this machine's load."""
    return seconds * SCALE
