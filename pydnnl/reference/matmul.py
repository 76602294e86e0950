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
