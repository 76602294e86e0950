"""numpy float64 oracle of the reduction primitive (oneDNN's dev-guide formulas).

``dst`` has ``src``'s number of dims, each equal to src's or 1; every dim where they differ
is reduced: max, min, sum, mul (product), mean (sum / count),
``norm_lp_max``: ``max(sum |x|^p, eps) ** (1/p)``, ``norm_lp_sum``: ``(sum |x|^p + eps) **
(1/p)``, ``norm_lp_power_p_max``: ``max(sum |x|^p, eps)``, ``norm_lp_power_p_sum``: ``sum
|x|^p + eps``.
"""
from __future__ import annotations

import numpy as np

from ..constants import algorithm


def reduction(alg, src: np.ndarray, dst_dims, p: float = 1.0, eps: float = 0.0) -> np.ndarray:
    """float64 result of shape ``dst_dims``."""
    x = np.asarray(src, np.float64)
    dst_dims = tuple(int(v) for v in dst_dims)
    if len(dst_dims) != x.ndim or any(d not in (1, s) for d, s in zip(dst_dims, x.shape)):
        raise ValueError(f"reduction reference: dst dims {list(dst_dims)} do not fit src "
                         f"dims {list(x.shape)}")
    axes = tuple(d for d in range(x.ndim) if dst_dims[d] != x.shape[d])
    alg = algorithm(int(alg))
    name = alg.name.removeprefix("reduction_")
    if name == "max":
        return np.max(x, axis=axes, keepdims=True)
    if name == "min":
        return np.min(x, axis=axes, keepdims=True)
    if name == "sum":
        return np.sum(x, axis=axes, keepdims=True)
    if name == "mul":
        return np.prod(x, axis=axes, keepdims=True)
    if name == "mean":
        return np.mean(x, axis=axes, keepdims=True)
    if not name.startswith("norm_lp_"):
        raise ValueError(f"reduction reference: unknown algorithm {alg.name}")
    acc = np.sum(np.abs(x) ** p, axis=axes, keepdims=True)
    acc = np.maximum(acc, eps) if name.endswith("_max") else acc + eps
    return acc if "power_p" in name else acc ** (1.0 / p)
