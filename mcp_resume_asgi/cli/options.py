"""The command line's options, each one also read from the environment (`MCP_RESUME_<NAME>`).

An option given on the command line wins; otherwise its environment variable, named after
the long option (`--store` is `MCP_RESUME_STORE`, `--node-timeout-s` is
`MCP_RESUME_NODE_TIMEOUT_S`); otherwise the default. A flag's variable is true for `1`,
`true`, `yes` or `on`. `--help` shows each option's variable. What the values mean is
checked where they are used (`Policy`, `resumable`, `store_from_url`), which name the
option at fault; this module only reads them.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ENV_PREFIX", "OptionError", "env_name", "parse_pairs", "with_environment"]

ENV_PREFIX = "MCP_RESUME_"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class OptionError(ValueError):
    """An option (or its environment variable) whose value cannot be read."""


def env_name(option: str) -> str:
    """`--node-timeout-s` -> `MCP_RESUME_NODE_TIMEOUT_S`."""
    return ENV_PREFIX + option.lstrip("-").replace("-", "_").upper()


def with_environment(parser: argparse.ArgumentParser, environ: Mapping[str, str] | None = None) -> None:
    """Make every long option of `parser` default to its environment variable (see the module
    doc), and say so in its help. Subparsers are handled through their own call."""
    env = os.environ if environ is None else environ
    for action in parser._actions:
        longs = [s for s in action.option_strings if s.startswith("--")]
        if not longs or action.dest in ("help", "version"):
            continue
        name = env_name(longs[0])
        action.help = f"{action.help or ''} [env: {name}]".strip()
        raw = env.get(name)
        if raw is None:
            continue
        if isinstance(action, argparse._StoreTrueAction):
            value = raw.strip().lower()
            if value not in _TRUE | _FALSE:
                raise OptionError(f"{name}={raw!r}: expected one of 1/0, true/false, yes/no, on/off")
            action.default = value in _TRUE
        elif isinstance(action, argparse._AppendAction):
            text = raw.strip()
            if text.startswith("{"):  # one JSON object
                action.default = [text]
            else:
                action.default = [item for item in (s.strip() for s in text.split(",")) if item]
        elif action.type is not None and callable(action.type):
            try:
                action.default = action.type(raw)
            except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
                raise OptionError(f"{name}={raw!r}: {exc}") from None
        else:
            action.default = raw


def parse_pairs(items: Sequence[str], what: str) -> dict[str, Any]:
    """`["retry_ms=20", "task_after_s=2"]` -> `{"retry_ms": 20, "task_after_s": 2}`: each value
    read as JSON (numbers, true/false, null), a plain string when it is not JSON. One item may
    also be a whole JSON object."""
    out: dict[str, Any] = {}
    for item in items:
        text = item.strip()
        if text.startswith("{"):
            try:
                whole = json.loads(text)
            except ValueError as exc:
                raise OptionError(f"{what} {text!r}: not a JSON object: {exc}") from None
            if not isinstance(whole, dict):
                raise OptionError(f"{what} {text!r}: not a JSON object")
            out.update(whole)
            continue
        key, sep, raw = text.partition("=")
        if not sep or not key.strip():
            raise OptionError(f"{what} {text!r}: expected NAME=VALUE, e.g. retry_ms=500")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        out[key.strip()] = value
    return out
