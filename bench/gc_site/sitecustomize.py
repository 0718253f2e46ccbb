"""Loaded by `bench.gc_http`'s server process (this folder on its PYTHONPATH): counts the garbage
collector's collections by generation and their time (`gc.callbacks`), and writes the counts to
`$BENCH_GC_STATS` at most twice a second, from the callback itself (no thread of its own)."""

import gc
import json
import os
import time

_PATH = os.environ.get("BENCH_GC_STATS")
if _PATH:
    _counts = [0, 0, 0]
    _seconds = [0.0, 0.0, 0.0]
    _started = [0.0]
    _written = [0.0]

    def _on_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            _started[0] = time.perf_counter()
            return
        generation = info["generation"]
        _counts[generation] += 1
        _seconds[generation] += time.perf_counter() - _started[0]
        now = time.monotonic()
        if now - _written[0] > 0.5:
            _written[0] = now
            with open(_PATH, "w") as f:
                json.dump({"collections": _counts, "seconds": _seconds}, f)

    gc.callbacks.append(_on_collection)
