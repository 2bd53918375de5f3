"""Seconds for a series of runs (harness): upstream's CI runs use ``limit``,
decode's workers ``fits_another``."""

from __future__ import annotations

import time


class Budget:
    """``total`` seconds for all runs (None: no limit), ``timeout`` for each, and
    ``reserve`` seconds kept for what runs last. :meth:`timed` records how long each
    kind of run took, which :meth:`fits_another` expects the next of that kind to take
    (the first of a kind may compile what the others reuse)."""

    def __init__(self, total=None, reserve: float = 0.0, *, timeout=None):
        self.end = time.monotonic() + total if total else None
        self.timeout = timeout or None
        self.reserve, self.last = reserve, {}

    def left(self) -> float | None:
        return None if self.end is None else max(1.0, self.end - time.monotonic())

    def spare(self) -> float | None:
        """Seconds a run may take and still leave the reserve (None: no limit): the
        first of a kind, with no time to expect, cannot eat what runs last."""
        left = self.left()
        return None if left is None else max(1.0, left - self.reserve)

    def limit(self) -> float | None:
        """Seconds for the next run (None: no limit; 0: the budget is spent)."""
        if self.end is None:
            return self.timeout
        left = self.end - time.monotonic()
        if left < 1:
            return 0
        return min(self.timeout, left) if self.timeout else left

    def fits_another(self, kind: str) -> bool:
        left = self.left()
        expected = self.last.get(kind, self.last.get(None, 0.0))
        return left is None or left - self.reserve > expected

    def timed(self, kind: str, fn, *args):
        t0 = time.monotonic()
        try:
            return fn(*args)
        finally:
            self.last[kind] = self.last[None] = time.monotonic() - t0
