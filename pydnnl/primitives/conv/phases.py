"""Backward data of a strided convolution as stride-1 convolutions, one per output phase.

Row ``y`` of diff_src sums tap ``kh`` of diff_dst at ``(y + ph - kh * dh) / sh`` where that
is a whole number. Split ``y = sh * a + r``: for a phase ``r`` the taps that land are those
with ``(r + ph - kh * dh) % sh == 0``, evenly spaced, and each reads diff_dst at ``a`` plus a
fixed offset that falls by a fixed step per tap: a stride-1 convolution over diff_dst with a
negative padding and dilation (what the gathering GEMM reads), whose output rows are every
``sh``-th row of diff_src from ``r``. Every tap belongs to exactly one phase per dimension;
a phase without taps is zeros.
"""
from __future__ import annotations

from math import gcd
from typing import NamedTuple


class Phase1D(NamedTuple):
    """One phase ``r`` of one spatial dimension."""

    r: int        #: the first diff_src position of the phase
    count: int    #: its positions: ``r, r + s, ...`` below the size
    taps: tuple   #: the kernel taps landing on it, in order
    off0: int     #: diff_dst offset of its first tap: ``a + off0``
    step: int     #: how far each next tap moves back in diff_dst


def phases_1d(size: int, kernel: int, stride: int, pad: int, dilate: int) -> list[Phase1D]:
    """The ``stride`` phases of a dimension of ``size`` diff_src positions (``dilate``:
    oneDNN's, 0 for dense taps); phases without positions are left out."""
    d = dilate + 1
    out = []
    for r in range(min(stride, size)):
        taps = tuple(k for k in range(kernel) if (r + pad - k * d) % stride == 0)
        step_k = stride // gcd(stride, d)  # taps of one phase lie this far apart
        off0 = (r + pad - taps[0] * d) // stride if taps else 0
        out.append(Phase1D(r, -(-(size - r) // stride), taps, off0, d * step_k // stride))
    return out


class Phase(NamedTuple):
    """One phase of a 2-D backward data: its rows and columns."""

    y: Phase1D
    x: Phase1D

    @property
    def empty(self) -> bool:
        return not (self.y.taps and self.x.taps)


def phases_2d(src_sp: tuple, kernel: tuple, strides: tuple, pad_l: tuple,
              dilates: tuple) -> list[Phase]:
    ys = phases_1d(src_sp[0], kernel[0], strides[0], pad_l[0], dilates[0])
    xs = phases_1d(src_sp[1], kernel[1], strides[1], pad_l[1], dilates[1])
    return [Phase(y, x) for y in ys for x in xs]
