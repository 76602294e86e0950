"""Philox4x32-10 counter-based random numbers in numpy, and pydnnl's dropout convention.

Philox4x32-R (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
SC'11) maps a 128-bit counter and a 64-bit key to 128 random bits with R rounds of two 32x32
-> 64-bit multiplications; it keeps no state, so every element of a tensor can draw its bits
independently on any device and get the same ones.

Dropout convention
------------------
A mask of ``n`` elements drawn with ``seed`` and ``offset`` (both unsigned 64-bit integers):

* element ``e`` (0-based) takes 32-bit word ``e % 4`` of
  ``philox4x32(counter=[g lo, g hi, offset lo, offset hi], key=[seed lo, seed hi])`` where
  ``g = e // 4`` ("lo"/"hi" are the low and high 32 bits), so four consecutive elements share
  one Philox call;
* the drop threshold is ``t = min(round(p * 2**32), 2**32 - 1)``: ``p * 2**32`` is exact in
  double precision (a power-of-two scaling), and ``round`` goes to the nearest integer, ties
  to even; p is the probability of *dropping* and must lie in [0, 1);
* element ``e`` is kept iff ``word >= t``, so it is kept with probability ``1 - t / 2**32``
  (within 2**-33 of ``1 - p``), and ``p = 0`` keeps every element;
* kept elements are scaled by ``scale = float32(1 / (1 - p))`` (the quotient taken in double
  precision, then rounded to float32); dropped elements become 0:
  ``y = keep ? x * scale : 0`` and ``dx = mask ? dy * scale : 0`` (a select, so a non-finite
  value in a dropped position gives 0, as the forward pass does).

Different ``offset`` values give unrelated masks for the same seed: a caller draws the
masks of several tensors, or of several training steps, from one seed by giving each its own
offset.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..error import invalid_arguments
from ..philox import (  # noqa: F401
    PHILOX_M0,
    PHILOX_M1,
    PHILOX_W0,
    PHILOX_W1,
    check_probability,
    check_u64,
    dropout_scale,
    dropout_threshold,
)

_M32 = np.uint64(0xFFFFFFFF)


def _uint32_array(a, name: str, last: int) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype != np.uint32:
        if arr.dtype.kind not in "iub" and arr.size:
            raise invalid_arguments(f"philox4x32: {name} must hold unsigned 32-bit integers, "
                                    f"got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() > 0xFFFFFFFF):
            raise invalid_arguments(f"philox4x32: {name} must hold values in [0, 2**32), got "
                                    f"values in [{arr.min()}, {arr.max()}]")
        arr = arr.astype(np.uint32)
    if arr.ndim < 1 or arr.shape[-1] != last:
        raise invalid_arguments(f"philox4x32: {name} must have a last dimension of {last}, got "
                                f"shape {arr.shape}")
    return arr


def philox4x32(counter, key, rounds: int = 10) -> np.ndarray:
    """Philox4x32-``rounds`` of every counter: ``counter`` [..., 4] and ``key`` [2] uint32
    words give [..., 4] uint32 words."""
    ctr = _uint32_array(counter, "counter", 4)
    k = _uint32_array(key, "key", 2)
    if k.shape != (2,):
        raise invalid_arguments(f"philox4x32: key must have shape (2,), got {k.shape}")
    if not isinstance(rounds, numbers.Integral) or rounds < 0:
        raise invalid_arguments(f"philox4x32: rounds must be a non-negative integer, got "
                                f"{rounds!r}")
    # 64-bit lanes hold the exact 32x32-bit products
    c0, c1, c2, c3 = (ctr[..., i].astype(np.uint64) for i in range(4))
    k0, k1 = np.uint64(k[0]), np.uint64(k[1])
    m0, m1 = np.uint64(PHILOX_M0), np.uint64(PHILOX_M1)
    for r in range(rounds):
        if r:
            k0 = (k0 + np.uint64(PHILOX_W0)) & _M32
            k1 = (k1 + np.uint64(PHILOX_W1)) & _M32
        p0, p1 = m0 * c0, m1 * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & _M32,
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & _M32)
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def dropout_words(seed: int, offset: int, n: int) -> np.ndarray:
    """The n random uint32 words of a mask: word ``e`` belongs to element ``e``."""
    seed, offset = check_u64(seed, "seed"), check_u64(offset, "offset")
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise invalid_arguments(f"dropout: n must be a non-negative integer, got {n!r}")
    groups = np.arange((int(n) + 3) // 4, dtype=np.uint64)
    ctr = np.empty(groups.shape + (4,), np.uint32)
    ctr[:, 0] = groups & _M32
    ctr[:, 1] = groups >> np.uint64(32)
    ctr[:, 2] = offset & 0xFFFFFFFF
    ctr[:, 3] = offset >> 32
    key = np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32)
    return philox4x32(ctr, key).reshape(-1)[: int(n)]


def dropout_keep(seed: int, offset: int, n: int, p: float) -> np.ndarray:
    """Boolean keep mask of ``n`` elements (True = kept) under the convention above."""
    t = dropout_threshold(p)
    return dropout_words(seed, offset, n) >= np.uint32(t)


def dropout_scales(seed: int, offset: int, n: int, p: float) -> np.ndarray:
    """float32 factors of ``n`` elements: ``1 / (1 - p)`` where kept, 0 where dropped."""
    keep = dropout_keep(seed, offset, n, p)
    return np.where(keep, dropout_scale(p), np.float32(0))


def dropout_forward(x: np.ndarray, seed: int, offset: int, p: float):
    """``(y, mask)`` of dropout on ``x`` (any shape, elements numbered in C order); ``mask``
    is uint8 (1 = kept) with ``x``'s shape."""
    x = np.asarray(x, np.float32)
    keep = dropout_keep(seed, offset, x.size, p).reshape(x.shape)
    y = np.where(keep, x * dropout_scale(p), np.float32(0)).astype(np.float32)
    return y, keep.astype(np.uint8)


def dropout_backward(dy: np.ndarray, mask: np.ndarray, p: float) -> np.ndarray:
    """``dx`` of dropout from the stored ``mask`` (nonzero = kept)."""
    dy = np.asarray(dy, np.float32)
    mask = np.asarray(mask)
    if mask.shape != dy.shape:
        raise invalid_arguments(f"dropout_backward: mask must have dy's shape {dy.shape}, got "
                                f"{mask.shape}")
    return np.where(mask != 0, dy * dropout_scale(p), np.float32(0)).astype(np.float32)
