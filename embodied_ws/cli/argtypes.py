"""Numeric argparse types that declare their range: every numeric CLI option uses one of these.

Each type is a callable object for ``add_argument(type=...)`` that keeps its bounds as attributes
(``kind``, ``low``, ``high``, ``low_open``, ``high_open``), so tests can walk the parser and feed each
option values outside its declared range. NaN, infinities and non-numbers are always refused; the
message is one line (``must be > 0 and <= 1e+07, got 'inf'``) that ``embodied_ws.cli`` prints as
``error: --opt: ...`` with exit code 2.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from embodied_ws.core.ranges import Range

#: the largest seed the toolkit accepts (NumPy's legacy seeding takes 32 bits; seed + episode must fit)
SEED_MAX = 2**31 - 1
#: the longest duration (s) a verb accepts: about 115 days
DURATION_MAX = 1e7
#: the most episodes, trials, ... a count option accepts
COUNT_MAX = 1_000_000
#: multipliers of a count's suffix (``450M``, ``3.3B``)
SUFFIXES = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_COUNT = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([KMBGTkmbgt]?)\s*")


@dataclass(frozen=True)
class Number(Range):
    """A numeric argparse type with a declared range (the bounds are :class:`Range`'s attributes).

    :param kind: ``int`` or ``float``
    """

    kind: type = float

    @property
    def __name__(self) -> str:  # argparse names the type in some of its messages
        return self.kind.__name__

    def describe(self) -> str:
        """The range in words: ``an integer >= 1 and <= 1000000``, ``> 0 and <= 1e+07``."""
        bounds = super().describe()
        return f"an integer {bounds}" if self.kind is int else bounds

    def __call__(self, text: str) -> int | float:
        """Parse ``text``; raises :class:`argparse.ArgumentTypeError` (one line) when it is out of range."""
        try:
            value: int | float = int(text) if self.kind is int else float(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}") from None
        if not self.contains(value):
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}")
        return value


@dataclass(frozen=True)
class Count(Number):
    """A large count written with an optional K/M/B/T suffix (``450M``, ``3.3B``, ``7e9``), as a float."""

    def describe(self) -> str:
        """The range in words: ``a positive parameter count like 450M or 3.3B, >= 1e+06 and <= 1e+13``."""
        return f"a positive parameter count like 450M or 3.3B, {super().describe()}"

    def __call__(self, text: str) -> float:
        """Parse ``text``; raises :class:`argparse.ArgumentTypeError` (one line) when it is out of range."""
        m = _COUNT.fullmatch(str(text))
        value = float(m[1]) * SUFFIXES[m[2].upper()] if m else float("nan")
        if not self.contains(value):
            raise argparse.ArgumentTypeError(f"expected {self.describe()}, got {text!r}")
        return value


def param_count(low: float = 1e6, high: float = 1e13) -> Count:
    """A model's parameter count in ``[low, high]`` (``450M``, ``3.3B``)."""
    return Count(low, high, kind=float)


def int_range(low: int | None = None, high: int | None = None) -> Number:
    """An integer in ``[low, high]``."""
    return Number(low, high, kind=int)


def positive_int(high: int = COUNT_MAX) -> Number:
    """An integer in ``[1, high]`` (counts: episodes, trials, jobs)."""
    return Number(1, high, kind=int)


def nonneg_int(high: int = COUNT_MAX) -> Number:
    """An integer in ``[0, high]``."""
    return Number(0, high, kind=int)


def seed_int() -> Number:
    """A random seed in ``[0, SEED_MAX]``."""
    return Number(0, SEED_MAX, kind=int)


def finite_float(
    low: float | None = None, high: float | None = None, low_inclusive: bool = True, high_inclusive: bool = True
) -> Number:
    """A finite number in the range ``low``..``high`` (each bound inclusive unless told otherwise)."""
    return Number(low, high, not low_inclusive, not high_inclusive, kind=float)


def positive_float(high: float = DURATION_MAX) -> Number:
    """A number in ``(0, high]`` (durations, rates)."""
    return Number(0.0, high, low_open=True, kind=float)


def nonneg_float(high: float = DURATION_MAX) -> Number:
    """A number in ``[0, high]``."""
    return Number(0.0, high, kind=float)
