"""Loaded by `bench.gc_http`'s server process (this folder on its PYTHONPATH): counts the garbage
collector's collections by generation, their time and the objects each generation freed
(`gc.callbacks`), the objects a full collection leaves in the oldest generation, and writes the counts to `$BENCH_GC_STATS` at most twice a second, from the
callback itself (no thread of its own). `$BENCH_GC_THRESHOLD` sets the youngest generation's
threshold (`gc.set_threshold`, 700 by default) for experiments.

With `$BENCH_GC_SSE` set it also times the end of the app's SSE answers (sse-starlette's
`EventSourceResponse`, which the SDK answers with): from the answer's last body message to the
return of the response's call, in seconds and in collections. The response cancels its helper
tasks after that last message, and the cancelled tasks' exceptions, tracebacks and frames form
reference cycles that the collector alone frees: the collections that run while the response
winds down decide in which generation they are found."""

import gc
import json
import os
import time

_PATH = os.environ.get("BENCH_GC_STATS")
if _PATH:
    _counts = [0, 0, 0]
    _seconds = [0.0, 0.0, 0.0]
    _collected = [0, 0, 0]
    _sse = {"answers": 0, "seconds": 0.0, "collections": 0, "older": 0}
    _started = [0.0]
    _written = [0.0]
    _oldest = [0]  # objects left in the oldest generation by the latest full collection

    def _write() -> None:
        with open(_PATH + ".part", "w") as f:
            json.dump(
                {
                    "collections": _counts,
                    "seconds": _seconds,
                    "collected": _collected,
                    "sse": _sse,
                    "oldest": _oldest[0],
                },
                f,
            )
        os.replace(_PATH + ".part", _PATH)  # (whole whenever `bench.gc_http` reads it)

    def _on_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            _started[0] = time.perf_counter()
            return
        generation = info["generation"]
        _counts[generation] += 1
        _seconds[generation] += time.perf_counter() - _started[0]
        _collected[generation] += info["collected"]
        if generation == 2:
            _oldest[0] = len(gc.get_objects(2))  # (a full collection's cost follows this count)
        now = time.monotonic()
        if now - _written[0] > 0.5:
            _written[0] = now
            _write()

    gc.callbacks.append(_on_collection)
    _write()  # (there from the start: a server may run no collection, `--threshold 0` none at all)
    if os.environ.get("BENCH_GC_THRESHOLD"):
        gc.set_threshold(int(os.environ["BENCH_GC_THRESHOLD"]), *gc.get_threshold()[1:])

    if os.environ.get("BENCH_GC_SSE"):
        from sse_starlette.sse import EventSourceResponse

        _respond = EventSourceResponse.__call__

        async def _timed_response(self, scope, receive, send):  # type: ignore[no-untyped-def]
            last: list[float] = []

            async def timed_send(message):  # type: ignore[no-untyped-def]
                await send(message)
                if message.get("type") == "http.response.body" and not message.get("more_body", False):
                    last[:] = [time.perf_counter(), sum(_counts), _counts[1] + _counts[2]]

            try:
                return await _respond(self, scope, receive, timed_send)
            finally:
                if last:
                    _sse["answers"] += 1
                    _sse["seconds"] += time.perf_counter() - last[0]
                    _sse["collections"] += sum(_counts) - last[1]
                    _sse["older"] += _counts[1] + _counts[2] - last[2]

        EventSourceResponse.__call__ = _timed_response  # type: ignore[method-assign]
