"""Loaded by `bench.lines`' server process (this folder on its PYTHONPATH, `$BENCH_LINES_OUT`
set): counts the Python lines the server's main thread (its event loop) executes and the
functions it calls, by function, between two `SIGUSR2`s (the first starts counting, the second
stops it and writes the counts to `$BENCH_LINES_OUT` as JSON). `sys.settrace` makes the server
tens of times slower while it counts: the counts, not the time, are the measure."""

import os

_PATH = os.environ.get("BENCH_LINES_OUT")
if _PATH:
    import collections
    import json
    import signal
    import sys

    _lines: collections.Counter[str] = collections.Counter()
    _calls: collections.Counter[str] = collections.Counter()
    _on = [False]

    def _key(code) -> str:  # type: ignore[no-untyped-def]
        return f"{code.co_filename}:{code.co_qualname}"

    def _local(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "line":
            _lines[_key(frame.f_code)] += 1
        return _local

    def _global(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "call":
            _calls[_key(frame.f_code)] += 1
            return _local
        return None

    def _toggle(signum, frame):  # type: ignore[no-untyped-def]
        if not _on[0]:
            _lines.clear()
            _calls.clear()
            _on[0] = True
            sys.settrace(_global)  # (the main thread's frames from now on)
            return
        sys.settrace(None)
        _on[0] = False
        with open(_PATH + ".part", "w") as f:
            json.dump({"lines": dict(_lines), "calls": dict(_calls)}, f)
        os.replace(_PATH + ".part", _PATH)  # (whole when it appears: `bench.lines` waits for it)

    signal.signal(signal.SIGUSR2, _toggle)
