"""Plain numpy reference of oneDNN's pooling (float64), written from the developer guide's
formulas, independently of the kernels.

Arrays are logical ``[N, C, spatial...]`` (1 to 3 spatial dims). Window ``o`` of a spatial
dim covers the input points ``o * stride - padding_l + k * (dilation + 1)`` for ``k <
kernel`` (oneDNN's dilation: 0 is dense). Points outside the input are padding:

* max: padding never wins; the result starts at the lowest float32 and takes a point only
  when it is strictly greater, so among equal values the first in (kd, kh, kw) order wins.
  The workspace records that point's index in its window, ``(kd * KH + kh) * KW + kw``
  (0 when no point of the window wins).
* avg_include_padding divides the sum of the points inside by the whole window size,
  avg_exclude_padding by the number of points inside.

Backward adds each ``diff_dst`` value into the ``diff_src`` points its forward window read:
the recorded argmax for max, every point inside (divided by the same denominator) for the
averages.
"""
from __future__ import annotations

import numpy as np

ALGS = ("max", "avg_include_padding", "avg_exclude_padding")
_LOWEST = float(np.finfo(np.float32).min)


def output_size(i: int, k: int, s: int, d: int, pl: int, pr: int) -> int:
    """oneDNN's rule, with C's truncating division: ``(i - ((k-1)*(d+1)+1) + pl + pr) / s + 1``."""
    num = i - ((k - 1) * (d + 1) + 1) + pl + pr
    q = abs(num) // s
    return (q if num >= 0 else -q) + 1


def _as5(x: np.ndarray) -> np.ndarray:
    nsp = x.ndim - 2
    return x.reshape(x.shape[:2] + (1,) * (3 - nsp) + x.shape[2:])


def _pad3(v, nsp: int, fill: int) -> tuple[int, int, int]:
    return (fill,) * (3 - nsp) + tuple(int(a) for a in v)


def _taps(src_sp, dst_sp, kernel, strides, dilation, padding_l):
    """Per tap ``(kd, kh, kw)`` in order: its flat index, the source positions of every
    window (three index arrays, clipped) and the mask of positions inside the input."""
    for kd in range(kernel[0]):
        for kh in range(kernel[1]):
            for kw in range(kernel[2]):
                pos, ok = [], []
                for ax, k in enumerate((kd, kh, kw)):
                    p = (np.arange(dst_sp[ax]) * strides[ax] - padding_l[ax]
                         + k * (dilation[ax] + 1))
                    ok.append((p >= 0) & (p < src_sp[ax]))
                    pos.append(np.clip(p, 0, src_sp[ax] - 1))
                idx = (kd * kernel[1] + kh) * kernel[2] + kw
                grid = np.ix_(*pos)
                mask = ok[0][:, None, None] & ok[1][None, :, None] & ok[2][None, None, :]
                yield idx, grid, mask


def _geometry(src_shape, kernel, strides, dilation, padding_l, padding_r):
    nsp = len(src_shape) - 2
    k = _pad3(kernel, nsp, 1)
    s = _pad3(strides, nsp, 1)
    d = _pad3(dilation, nsp, 0)
    pl = _pad3(padding_l, nsp, 0)
    pr = _pad3(padding_r, nsp, 0)
    src_sp = (1,) * (3 - nsp) + tuple(src_shape[2:])
    dst_sp = tuple(output_size(i, *a) for i, a in zip(src_sp, zip(k, s, d, pl, pr)))
    return nsp, k, s, d, pl, src_sp, dst_sp


def pooling_forward(src: np.ndarray, alg: str, kernel, strides, dilation, padding_l,
                    padding_r) -> tuple[np.ndarray, np.ndarray | None]:
    """``(dst, workspace)`` in float64 (workspace: int64 window indices, max only)."""
    if alg not in ALGS:
        raise ValueError(f"alg must be one of {ALGS}, got {alg!r}")
    x = _as5(np.asarray(src, np.float64))
    nsp, k, s, d, pl, src_sp, dst_sp = _geometry(src.shape, kernel, strides, dilation,
                                                 padding_l, padding_r)
    out_shape = x.shape[:2] + dst_sp
    if alg == "max":
        acc = np.full(out_shape, _LOWEST)
        arg = np.zeros(out_shape, np.int64)
        for idx, grid, mask in _taps(src_sp, dst_sp, k, s, d, pl):
            v = np.where(mask, x[(slice(None), slice(None)) + grid], -np.inf)
            better = v > acc
            acc = np.where(better, v, acc)
            arg = np.where(better, idx, arg)
        final = out_shape[:2] + dst_sp[3 - nsp:]
        return acc.reshape(final), arg.reshape(final)
    acc = np.zeros(out_shape)
    count = np.zeros(dst_sp)
    for _idx, grid, mask in _taps(src_sp, dst_sp, k, s, d, pl):
        acc += np.where(mask, x[(slice(None), slice(None)) + grid], 0.0)
        count += mask
    denom = float(np.prod(k)) if alg == "avg_include_padding" else count
    final = out_shape[:2] + dst_sp[3 - nsp:]
    return (acc / denom).reshape(final), None


def pooling_backward(diff_dst: np.ndarray, src_shape, alg: str, kernel, strides, dilation,
                     padding_l, padding_r, workspace: np.ndarray | None = None) -> np.ndarray:
    """``diff_src`` (float64) for ``diff_dst``; max pooling needs the forward's workspace."""
    if alg not in ALGS:
        raise ValueError(f"alg must be one of {ALGS}, got {alg!r}")
    nsp, k, s, d, pl, src_sp, dst_sp = _geometry(src_shape, kernel, strides, dilation,
                                                 padding_l, padding_r)
    g = _as5(np.asarray(diff_dst, np.float64))
    if g.shape[2:] != dst_sp:
        raise ValueError(f"diff_dst spatial dims {g.shape[2:]} do not match {dst_sp}")
    out = np.zeros(tuple(src_shape[:2]) + src_sp)
    if alg == "max":
        if workspace is None:
            raise ValueError("max pooling backward needs the forward's workspace")
        ws = _as5(np.asarray(workspace))
    else:
        count = np.zeros(dst_sp)
        for _idx, _grid, mask in _taps(src_sp, dst_sp, k, s, d, pl):
            count += mask
        denom = float(np.prod(k)) if alg == "avg_include_padding" else count
        share = g / np.where(np.asarray(denom) == 0, 1.0, denom)
    for idx, grid, mask in _taps(src_sp, dst_sp, k, s, d, pl):
        if alg == "max":
            val = np.where(mask & (ws == idx), g, 0.0)
        else:
            val = np.where(mask, share, 0.0)
        full = tuple(np.broadcast_to(a, dst_sp) for a in grid)
        np.add.at(out, (slice(None), slice(None)) + full, val)
    return out.reshape(tuple(src_shape))
