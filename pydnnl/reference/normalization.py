"""float64 numpy reference of oneDNN's batch and layer normalization (forward and backward),
from the developer guide's formulas: population (biased, 1/N) variance, ``eps`` inside the
square root, optional scale (gamma) and shift (beta), batch normalization's fused ReLU
and its fused addition before the ReLU (``fuse_norm_add_relu``: ``ReLU(bn(src) + src_1)``,
the gradient gated by the ReLU's mask flowing to ``src_1`` as it is).

Batch normalization reduces over every axis but 1 (``[N, C, spatial...]``); layer
normalization over the last axis only. The backward functions return ``(diff_src,
diff_scale, diff_shift)``; with ``global_stats`` the statistics are constants.
"""
from __future__ import annotations

import numpy as np


def _bn_axes(x: np.ndarray) -> tuple[int, ...]:
    return (0,) + tuple(range(2, x.ndim))


def _bn_shape(x: np.ndarray) -> tuple[int, ...]:
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def batch_norm_forward(x, eps: float, mean=None, var=None, scale=None, shift=None,
                       relu: bool = False, add=None):
    """``(dst, mean, variance)``; the statistics are computed unless both are given.
    ``add`` (``fuse_norm_add_relu``'s src_1, the shape of ``x``) is added to the normalized
    value, then the ReLU clamps (``add`` implies the ReLU, as the flag does)."""
    x = np.asarray(x, np.float64)
    axes, shape = _bn_axes(x), _bn_shape(x)
    if mean is None or var is None:
        mean = x.mean(axis=axes)
        var = ((x - mean.reshape(shape)) ** 2).mean(axis=axes)
    mean, var = np.asarray(mean, np.float64), np.asarray(var, np.float64)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    if scale is not None:
        y = y * np.asarray(scale, np.float64).reshape(shape)
    if shift is not None:
        y = y + np.asarray(shift, np.float64).reshape(shape)
    if add is not None:
        y = y + np.asarray(add, np.float64)
    if relu or add is not None:
        y = np.maximum(y, 0.0)
    return y, mean, var


def batch_norm_backward(x, dy, mean, var, eps: float, scale=None, global_stats: bool = False,
                        relu_mask=None):
    """``(diff_src, diff_scale, diff_shift)``; ``relu_mask`` (dst > 0 of the fused ReLU)
    gates ``dy`` first."""
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    if relu_mask is not None:
        dy = np.where(relu_mask, dy, 0.0)
    axes, shape = _bn_axes(x), _bn_shape(x)
    count = x.size // x.shape[1]
    inv = 1.0 / np.sqrt(np.asarray(var, np.float64) + eps)
    xc = x - np.asarray(mean, np.float64).reshape(shape)
    xhat = xc * inv.reshape(shape)
    gamma = np.ones(x.shape[1]) if scale is None else np.asarray(scale, np.float64)
    d_shift = dy.sum(axis=axes)
    d_scale = (dy * xhat).sum(axis=axes)
    g = (gamma * inv).reshape(shape)
    if global_stats:
        dx = g * dy
    else:
        dx = g * (dy - d_shift.reshape(shape) / count - xhat * d_scale.reshape(shape) / count)
    return dx, d_scale, d_shift


def batch_norm_backward_add_relu(x, dy, mean, var, eps: float, relu_mask, scale=None,
                                 global_stats: bool = False):
    """``(diff_src, diff_scale, diff_shift, diff_src_1)`` of ``fuse_norm_add_relu``:
    ``dy`` gated by ``relu_mask`` (dst > 0) is ``diff_src_1`` and feeds
    :func:`batch_norm_backward`."""
    g = np.where(relu_mask, np.asarray(dy, np.float64), 0.0)
    dx, d_scale, d_shift = batch_norm_backward(x, g, mean, var, eps, scale, global_stats)
    return dx, d_scale, d_shift, g


def layer_norm_forward(x, eps: float, mean=None, var=None, scale=None, shift=None):
    """``(dst, mean, variance)`` normalizing over the last axis; statistics have the shape of
    ``x`` without its last axis."""
    x = np.asarray(x, np.float64)
    if mean is None or var is None:
        mean = x.mean(axis=-1)
        var = ((x - mean[..., None]) ** 2).mean(axis=-1)
    mean, var = np.asarray(mean, np.float64), np.asarray(var, np.float64)
    y = (x - mean[..., None]) / np.sqrt(var[..., None] + eps)
    if scale is not None:
        y = y * np.asarray(scale, np.float64)
    if shift is not None:
        y = y + np.asarray(shift, np.float64)
    return y, mean, var


def layer_norm_backward(x, dy, mean, var, eps: float, scale=None, global_stats: bool = False):
    """``(diff_src, diff_scale, diff_shift)`` of :func:`layer_norm_forward`."""
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    C = x.shape[-1]
    inv = 1.0 / np.sqrt(np.asarray(var, np.float64) + eps)[..., None]
    xhat = (x - np.asarray(mean, np.float64)[..., None]) * inv
    lead = tuple(range(x.ndim - 1))
    d_scale = (dy * xhat).sum(axis=lead)
    d_shift = dy.sum(axis=lead)
    g = dy * (np.ones(C) if scale is None else np.asarray(scale, np.float64))
    if global_stats:
        dx = inv * g
    else:
        dx = inv * (g - g.mean(axis=-1, keepdims=True)
                    - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, d_scale, d_shift
