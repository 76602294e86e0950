"""Matrix multiplication in float64 numpy, as oneDNN's matmul defines it: ``dst = src @
weights (+ bias)`` over the last two dimensions, leading (batch) dimensions broadcast where
one side has 1, the bias broadcast over every dimension where it has 1."""
from __future__ import annotations

import numpy as np


def matmul(src: np.ndarray, weights: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """``src [..., M, K] @ weights [..., K, N] (+ bias)`` in float64."""
    out = np.matmul(np.asarray(src, np.float64), np.asarray(weights, np.float64))
    if bias is not None:
        out = out + np.asarray(bias, np.float64)
    return out


# value ranges of the integer data types a quantized result saturates into
_INT_RANGE = {"s8": (-128, 127), "u8": (0, 255), "s32": (-2 ** 31, 2 ** 31 - 1)}


def matmul_int8(src, weights, bias=None, src_scale=1.0, wei_scale=1.0, dst_scale=1.0,
                zp_src=0, zp_wei=0, zp_dst=0, post_ops=None) -> np.ndarray:
    """oneDNN v3's quantized matmul before the final conversion, in float64:
    ``post_ops(src_scale * wei_scale * ((src - zp_src) @ (weights - zp_wei)) + bias) /
    dst_scale + zp_dst``, the product exact (int64); scales and zero points are scalars or
    arrays broadcast against dst (a per-N weights scale: shape ``[N]``); ``post_ops`` a
    callable on the float64 result."""
    acc = np.matmul(np.asarray(src, np.int64) - np.asarray(zp_src, np.int64),
                    np.asarray(weights, np.int64) - np.asarray(zp_wei, np.int64))
    y = (np.asarray(src_scale, np.float64) * np.asarray(wei_scale, np.float64)
         * acc.astype(np.float64))
    if bias is not None:
        y = y + np.asarray(bias, np.float64)
    if post_ops is not None:
        y = post_ops(y)
    return y / np.asarray(dst_scale, np.float64) + np.asarray(zp_dst, np.float64)


def quantize(y: np.ndarray, dt: str) -> np.ndarray:
    """``y`` stored into data type ``dt`` (a name) as oneDNN stores a result: integers
    rounded half to even and saturated, bf16/f16/f32 rounded to nearest even (returned as
    float64 values)."""
    y = np.asarray(y, np.float64)
    if dt in _INT_RANGE:
        lo, hi = _INT_RANGE[dt]
        return np.clip(np.rint(y), lo, hi)
    if dt == "f16":
        return y.astype(np.float16).astype(np.float64)
    f = y.astype(np.float32)
    if dt == "bf16":  # round the f32 to its top 16 bits, ties to even
        u = f.view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        f = u.astype(np.uint32).view(np.float32)
    return f.astype(np.float64)
