"""Range-declaring field helpers and shared bounds of the typed config (:mod:`embodied_ws.config.schema`).

A numeric field declares its range once, with :func:`num` (or :func:`within` for a list); the loader reads it
back with :func:`declared_range` and refuses values outside it, NaN and inf.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from embodied_ws.core.ranges import Range

#: the most env steps a budget or interval may name
STEPS_MAX = 10**13
#: the largest seed (NumPy's legacy seeding takes 32 bits; seed + env index must fit)
SEED_MAX = 2**31 - 1
#: the most episodes an evaluation may run
COUNT_MAX = 1_000_000
#: the range of a reward-term weight
WEIGHT = (-1e6, 1e6)


def num(
    default: Any,
    low: float | None,
    high: float | None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    text: str = "",
) -> Any:
    """A numeric field whose range is declared here, once: the loader refuses values outside it, NaN and inf.

    :param default: the field's default (None for an optional number)
    :param low: smallest allowed value
    :param high: largest allowed value
    :param low_open: ``low`` itself is not allowed
    :param high_open: ``high`` itself is not allowed
    :param text: the range in words, when the bounds alone would mislead
    """
    return field(default=default, metadata={"range": Range(low, high, low_open, high_open, text)})


def within(low: float, high: float) -> dict[str, Range]:
    """Field metadata declaring that every item of a list of numbers lies in ``[low, high]`` (see :func:`num`).

    :param low: smallest allowed item
    :param high: largest allowed item
    """
    return {"range": Range(low, high)}


def declared_range(f: Any) -> Range | None:
    """The :class:`Range` a dataclass field declares (None: not a number, or undeclared)."""
    r = f.metadata.get("range")
    return r if isinstance(r, Range) else None
