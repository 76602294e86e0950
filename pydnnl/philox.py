"""Philox4x32 constants and pydnnl's dropout convention: the facts the device kernels and the
numpy reference (:mod:`pydnnl.reference.philox`, which documents the whole convention) both
follow, so neither imports the other."""
from __future__ import annotations

import numbers

import numpy as np

from .error import invalid_arguments

# Multipliers and key increments of Philox4x32 (Salmon et al., SC'11, section 5).
PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9  # golden ratio
PHILOX_W1 = 0xBB67AE85  # sqrt(3) - 1
_U64_LIMIT = 1 << 64


def check_u64(value, name: str) -> int:
    """``value`` as a Python int, or ``invalid_arguments`` unless it is an integer in [0, 2**64)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise invalid_arguments(f"dropout: {name} must be an unsigned 64-bit integer, got "
                                f"{type(value).__name__} {value!r}")
    v = int(value)
    if not 0 <= v < _U64_LIMIT:
        raise invalid_arguments(f"dropout: {name} must lie in [0, 2**64), got {v}")
    return v


def check_probability(p) -> float:
    """``p`` as a float, or ``invalid_arguments`` unless it is a real number in [0, 1)."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise invalid_arguments(f"dropout: p must be a real number in [0, 1), got "
                                f"{type(p).__name__} {p!r}")
    v = float(p)
    if not 0.0 <= v < 1.0:  # also rejects NaN
        raise invalid_arguments(f"dropout: p must lie in [0, 1), got {v!r}")
    return v


def dropout_threshold(p: float) -> int:
    """The drop threshold of ``p``: ``min(round_half_even(p * 2**32), 2**32 - 1)``."""
    v = check_probability(p)
    return min(round(v * 4294967296.0), 0xFFFFFFFF)


def dropout_scale(p: float) -> np.float32:
    """The factor of kept elements: ``float32(1 / (1 - p))``."""
    return np.float32(1.0 / (1.0 - check_probability(p)))
