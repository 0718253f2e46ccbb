"""`mcp-resume inspect --store URL`: what a shared store holds, as a table or JSON, read-only.

A memory store lives inside the process that made it: there is nothing to inspect from
outside, and the command says so. A Redis store (one instance or a Cluster) is walked
by `store.redis_survey`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio

from mcp_resume_asgi.cli.options import OptionError
from mcp_resume_asgi.store.memory import MemoryStore
from mcp_resume_asgi.store.urls import store_from_url

__all__ = ["inspect_command", "table"]

_KINDS = ("nodes", "sessions", "streams", "tasks", "rest_calls")


def inspect_command(args: argparse.Namespace) -> int:
    """Run `inspect` as `args` say; the exit status."""
    if not args.store:
        raise OptionError("--store URL is required (or MCP_RESUME_STORE), e.g. redis://localhost:6379/0")
    if args.limit < 0:
        raise OptionError("--limit must be 0 or more")
    if args.store.partition(":")[0].lower() == "sqlite":
        # Not opened: opening takes the file's one-process lock from the server that holds it.
        raise OptionError("inspect reads Redis stores; a SQLite file belongs to the one process serving it")
    options: dict[str, Any] = {"prefix": args.prefix} if args.prefix else {}
    try:
        store = store_from_url(args.store, **options)
    except TypeError:
        raise OptionError(
            "--prefix is a Redis key prefix: it needs a redis:// or rediss:// --store"
        ) from None
    except (ValueError, ImportError) as exc:
        raise OptionError(f"--store: {exc}") from None
    if isinstance(store, MemoryStore):
        raise OptionError(
            "memory:// lives inside the process that serves it: inspect a shared store (redis://...)"
        )
    from mcp_resume_asgi.store.redis import RedisStore

    if not isinstance(store, RedisStore):
        raise OptionError(f"inspect reads Redis stores; {type(store).__name__} is not one yet")

    async def walk() -> dict[str, Any]:
        from mcp_resume_asgi.store.redis_survey import survey

        try:
            found = await survey(
                store, limit=args.limit, principals=args.show_principals, payloads=args.show_payloads
            )
        except Exception as exc:
            if store.is_unavailable_error(exc):
                raise OptionError(f"--store: cannot reach {args.store}: {exc}") from None
            raise
        finally:
            await store.aclose()
        return found.as_json()

    view = anyio.run(walk)
    sys.stdout.write(json.dumps(view, indent=2) + "\n" if args.json else table(view))
    return 0


def table(view: dict[str, Any]) -> str:
    """The survey as text: the counts, then each kind's newest entries, one line each."""
    lines = [f"store prefix {view['prefix']!r}" + (" (walk truncated)" if view["truncated"] else "")]
    lines.append("  ".join(f"{kind}: {view['counts'].get(kind, 0)}" for kind in _KINDS))
    if view["stream_states"]:
        lines.append(
            "streams by state: " + ", ".join(f"{k} {v}" for k, v in sorted(view["stream_states"].items()))
        )
    for kind in _KINDS:
        entries = view["newest"].get(kind) or []
        if not entries:
            continue
        lines.append("")
        lines.append(f"{kind} (newest {len(entries)}):")
        columns = list(dict.fromkeys(name for entry in entries for name in entry))
        rows = [[_cell(entry.get(name)) for name in columns] for entry in entries]
        widths = [max(len(name), *(len(row[i]) for row in rows)) for i, name in enumerate(columns)]
        lines.append("  " + "  ".join(name.ljust(widths[i]) for i, name in enumerate(columns)))
        lines += ["  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= 48 else text[:45] + "..."
