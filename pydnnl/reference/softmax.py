"""numpy float64 oracle of the softmax primitives (oneDNN's dev-guide formulas).

Forward, along ``axis``, with ``nu`` the maximum over the axis (subtracted for accuracy):
``softmax_accurate``: ``dst = exp(src - nu) / sum(exp(src - nu))``;
``softmax_log``: ``dst = src - nu - log(sum(exp(src - nu)))``.
Backward from ``dst`` and ``diff_dst``: accurate ``diff_src = dst * (diff_dst -
sum(diff_dst * dst))``; log ``diff_src = diff_dst - exp(dst) * sum(diff_dst)``.
"""
from __future__ import annotations

import numpy as np

from ..constants import algorithm


def _is_log(alg) -> bool:
    alg = algorithm(int(alg))
    if alg not in (algorithm.softmax_accurate, algorithm.softmax_log):
        raise ValueError(f"softmax reference: algorithm must be softmax_accurate or "
                         f"softmax_log, got {alg.name}")
    return alg == algorithm.softmax_log


def softmax_forward(alg, src: np.ndarray, axis: int) -> np.ndarray:
    """float64 ``dst`` of the forward softmax of ``src`` along ``axis``."""
    x = np.asarray(src, np.float64)
    nu = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - nu)
    total = np.sum(e, axis=axis, keepdims=True)
    if _is_log(alg):
        return x - nu - np.log(total)
    return e / total


def softmax_backward(alg, diff_dst: np.ndarray, dst: np.ndarray, axis: int) -> np.ndarray:
    """float64 ``diff_src`` from ``diff_dst`` and the forward's ``dst``."""
    dd = np.asarray(diff_dst, np.float64)
    y = np.asarray(dst, np.float64)
    if _is_log(alg):
        return dd - np.exp(y) * np.sum(dd, axis=axis, keepdims=True)
    return y * (dd - np.sum(dd * y, axis=axis, keepdims=True))
