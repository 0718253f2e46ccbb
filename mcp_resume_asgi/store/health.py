"""The store's health as the library sees it: whether to try it now, and what to log meanwhile.

Resumability needs the store; the app does not. So when the store fails, requests skip it
for `STORE_RETRY_S` before it is tried again (`StoreHealth`), and the cause is logged once
per outage rather than once per failed call (`OutageLog`). Plain state and logging: what
the middleware answers meanwhile is the ASGI side's (`http/outage.py`).
"""

from __future__ import annotations

import logging
import math
import time

from mcp_resume_asgi.store.base import Store

logger = logging.getLogger(__name__)

#: After the store failed, how long requests skip it before trying again.
STORE_RETRY_S = 2.0
#: The most causes an `OutageLog` remembers having logged (the oldest are forgotten).
_CAUSES_KEPT = 32


def describe_error(exc: BaseException) -> str:
    """The causes of `exc` as `Type: message`, task-group wrappers unwrapped.

    A failure inside a task group reaches us as "unhandled errors in a TaskGroup (1
    sub-exception)", which says nothing; the leaves (`ConnectionError: ... refused`) do.
    """
    leaves: list[str] = []
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop(0)
        if isinstance(current, BaseExceptionGroup):
            pending[:0] = current.exceptions
            continue
        text = f"{type(current).__name__}: {current}" if str(current) else type(current).__name__
        if text not in leaves:
            leaves.append(text)
    return "; ".join(leaves)


class OutageLog:
    """What one retried operation (the cluster link, the heartbeat) logs while it keeps failing.

    During a store outage the same call fails every second for as long as it lasts;
    a line (and a traceback) per failure buries the cause and everything else in the
    log. So: the cause once when the outage starts, at `level`; a reminder at most
    every `remind_s` while it lasts (each other failure at DEBUG); INFO when it is back.
    An operation that comes back and fails again for the same cause within `remind_s` of
    that cause's last line (a link that flaps) is one condition: its outages start and end
    at DEBUG until `remind_s` has passed, and the next line says how many there were.
    Lines go to `log_to`, the logger of the part that retries (this module's by default).
    """

    def __init__(
        self,
        what: str,
        *,
        level: int = logging.ERROR,
        remind_s: float = 60.0,
        log_to: logging.Logger = logger,
    ) -> None:
        self.what = what
        self.level = level
        self.remind_s = remind_s
        self.logger = log_to
        self.down_since: float | None = None
        self._reminded = 0.0
        self._failures = 0
        self._logged: dict[str, tuple[float, int]] = {}
        """By cause logged at `level`: when, and how many outages of that cause were logged at DEBUG
        since (the causes of the last `remind_s`, and those with such outages; `_CAUSES_KEPT`)."""
        self._quiet = False
        """This outage is logged at DEBUG: its cause was logged less than `remind_s` ago."""

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, exc: BaseException) -> None:
        now = time.monotonic()
        cause = describe_error(exc)
        self._failures += 1
        if self.down_since is None:
            self.down_since = now
            self._failures = 1
            logged_at, quiet = self._logged.get(cause, (-math.inf, 0))
            self._quiet = now - logged_at < self.remind_s
            if self._quiet:
                self._logged[cause] = (logged_at, quiet + 1)
                self.logger.debug(
                    "%s failed again (%s), %d times since last logged", self.what, cause, quiet + 1
                )
                return
            self._reminded = now
            self._logged.pop(cause, None)
            self._logged = {  # (the causes of this interval, and those with outages not told yet)
                c: at
                for c, at in list(self._logged.items())[-_CAUSES_KEPT:]
                if at[1] or now - at[0] < self.remind_s
            }
            self._logged[cause] = (now, 0)
            again = f" ({quiet} more times since last logged)" if quiet else ""
            self.logger.log(
                self.level,
                "%s failed%s (%s); retrying, logged again at most every %.0f s until it is back",
                self.what,
                again,
                cause,
                self.remind_s,
            )
            self.logger.debug("%s: the first failure", self.what, exc_info=exc)
        elif now - self._reminded >= self.remind_s:
            self._reminded = now
            self.logger.warning(
                "%s still failing after %.0f s (%d attempts): %s",
                self.what,
                now - self.down_since,
                self._failures,
                cause,
            )
        else:
            self.logger.debug("%s still failing: %s", self.what, cause)

    def recovered(self) -> None:
        if self.down_since is None:
            return
        self.logger.log(
            logging.DEBUG if self._quiet else logging.INFO,
            "%s is back after %.1f s (%d failed attempts)",
            self.what,
            time.monotonic() - self.down_since,
            self._failures,
        )
        self.down_since = None


class StoreHealth:
    """The store's health as the middleware sees it (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.down_until = 0.0
        self.log = OutageLog("the store (serving without resumability meanwhile)")

    @property
    def skipping(self) -> bool:
        """The store failed a moment ago: do not try it yet."""
        return self.down_until > time.monotonic()

    def failed(self, exc: BaseException) -> None:
        self.down_until = time.monotonic() + STORE_RETRY_S
        self.log.failed(exc)  # the cause once per outage, then a reminder a minute

    def maybe_recovered(self) -> None:
        if self.log.down_since is not None and self.down_until <= time.monotonic():  # (`down`: every request)
            self.log.recovered()

    def is_outage(self, exc: BaseException) -> bool:
        """The store cannot be reached: `exc` is its error, or a task group's group of only such errors."""
        if isinstance(exc, BaseExceptionGroup):
            return all(self.is_outage(inner) for inner in exc.exceptions)
        return self.store.is_unavailable_error(exc)
