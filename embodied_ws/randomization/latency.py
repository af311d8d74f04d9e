"""Batched delay lines for action and observation latency (whole control steps), and noise."""

from __future__ import annotations

import numpy as np


class DelayLine:
    """Delays a batch of vectors by a per-env number of pushes.

    ``push(x_t)`` returns ``x_{t-k}`` for each env's delay ``k``; before ``k`` pushes have
    happened since :meth:`reset`, it returns the reset fill value.

    :param n: batch size (envs)
    :param dim: vector size
    :param max_delay: largest delay in steps
    """

    def __init__(self, n: int, dim: int, max_delay: int) -> None:
        self.length = max_delay + 1
        self.buf = np.zeros((self.length, n, dim))
        self.delay = np.zeros(n, dtype=np.int64)
        self.head = 0
        self._envs = np.arange(n)
        self._common: int | None = 0  # the delay when every env has the same one (always so for n = 1)

    def reset(self, env: int, fill: np.ndarray, delay: int) -> None:
        """Restart env ``env``'s line: fill its history with ``fill`` and set its delay."""
        if not 0 <= delay < self.length:
            raise ValueError(f"delay {delay} outside 0..{self.length - 1}")
        self.buf[:, env] = fill
        self.delay[env] = delay
        self._common = delay if (self.delay == delay).all() else None

    def push(self, x: np.ndarray) -> np.ndarray:
        """Store ``x`` (n, dim) and return the delayed batch."""
        if self.length == 1:
            return x
        self.head = (self.head + 1) % self.length
        self.buf[self.head] = x
        if self._common is not None:  # one basic index instead of per-env fancy indexing
            return self.buf[(self.head - self._common) % self.length].copy()
        return self.buf[(self.head - self.delay) % self.length, self._envs]


def add_noise(x: np.ndarray, std: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``x`` plus zero-mean Gaussian noise with per-env ``std`` (n,); untouched where std is 0."""
    if not std.any():
        return x
    return x + rng.standard_normal(x.shape) * std[:, None]


class NoiseSource:
    """Per-env Gaussian noise drawn in blocks of ``block`` steps (one RNG call per block, not per step).

    :param rng: the stream the noise comes from (deterministic for a given seed)
    :param shape: ``(n, dim)`` of one step's noise
    """

    def __init__(self, rng: np.random.Generator, shape: tuple[int, int], block: int = 256) -> None:
        self.rng, self.shape, self.block = rng, shape, block
        self._buf = np.empty((0, *shape))
        self._i = 0

    def add(self, x: np.ndarray, std_col: np.ndarray) -> np.ndarray:
        """``x + noise * std_col`` where ``std_col`` is ``(n, 1)``."""
        if self._i >= len(self._buf):
            self._buf = self.rng.standard_normal((self.block, *self.shape))
            self._i = 0
        out = x + self._buf[self._i] * std_col
        self._i += 1
        return out
