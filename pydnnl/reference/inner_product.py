"""Inner product (fully connected) in float64 numpy, as oneDNN defines it: every output
channel is the dot product of one image's whole input (channels and spatial points) with that
channel's weights, plus its bias."""
from __future__ import annotations

import numpy as np


def inner_product_forward(src: np.ndarray, weights: np.ndarray,
                          bias: np.ndarray | None = None) -> np.ndarray:
    """``src [N, IC, ...] . weights [OC, IC, ...] (+ bias [OC])`` -> ``[N, OC]``."""
    x = np.asarray(src, np.float64).reshape(src.shape[0], -1)
    w = np.asarray(weights, np.float64).reshape(weights.shape[0], -1)
    out = x @ w.T
    if bias is not None:
        out = out + np.asarray(bias, np.float64)
    return out


def inner_product_backward_data(diff_dst: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``diff_src [N, IC, ...]`` of the forward above, in float64."""
    w = np.asarray(weights, np.float64).reshape(weights.shape[0], -1)
    dx = np.asarray(diff_dst, np.float64) @ w
    return dx.reshape((diff_dst.shape[0],) + tuple(weights.shape[1:]))


def inner_product_backward_weights(src: np.ndarray, diff_dst: np.ndarray):
    """``(diff_weights [OC, IC, ...], diff_bias [OC])`` of the forward above, in float64."""
    dd = np.asarray(diff_dst, np.float64)
    x = np.asarray(src, np.float64).reshape(src.shape[0], -1)
    dw = (dd.T @ x).reshape((dd.shape[1],) + tuple(src.shape[1:]))
    return dw, dd.sum(axis=0)


def inner_product_int8(src, weights, bias=None, src_scale=1.0, wei_scale=1.0, dst_scale=1.0,
                       post_ops=None) -> np.ndarray:
    """oneDNN's int8 inner product before the final conversion, in float64: ``post_ops(
    src_scale * wei_scale * (src . weights^T) + bias) / dst_scale`` with the product exact
    (int64); ``wei_scale`` a scalar or one per output channel ``[OC]``."""
    from .matmul import matmul_int8

    x = np.asarray(src).reshape(src.shape[0], -1)
    w = np.asarray(weights).reshape(weights.shape[0], -1)
    return matmul_int8(x, w.T, bias, src_scale, wei_scale, dst_scale, post_ops=post_ops)
