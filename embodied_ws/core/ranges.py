"""Declared ranges of numeric values (CLI options and config fields): one place says what is allowed.

A :class:`Range` is finite by construction: NaN and the infinities are never inside one, so every
declared value is refused when it is not a real, bounded number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def fmt_number(v: float) -> str:
    """A bound as users write it: ``1``, ``0.5``, ``1e+07``."""
    return str(v) if isinstance(v, int) else f"{v:g}"


@dataclass(frozen=True)
class Range:
    """The values a number may take.

    :param low: smallest allowed value (None: no lower bound)
    :param high: largest allowed value (None: no upper bound)
    :param low_open: the lower bound itself is not allowed (``> low``)
    :param high_open: the upper bound itself is not allowed (``< high``)
    :param text: the range in words, when the bounds alone would mislead (``0 (off) or 1-99``)
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    text: str = ""

    def describe(self) -> str:
        """The range in words: ``> 0 and <= 1``, ``>= 0``, ``finite``."""
        if self.text:
            return self.text
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {fmt_number(self.low)}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {fmt_number(self.high)}")
        return " and ".join(parts) or "finite"

    def contains(self, value: float) -> bool:
        """Whether ``value`` is a finite number inside the range."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.high_open else value > self.high))
