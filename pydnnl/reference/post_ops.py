"""Reference post-ops (float64 numpy): a ``pydnnl.post_ops`` chain applied to a primitive's
result, the way oneDNN defines each entry."""
from __future__ import annotations

import numpy as np

from ..constants import algorithm
from .eltwise import eltwise_forward

A = algorithm
_BINARY = {
    A.binary_add: np.add, A.binary_sub: np.subtract, A.binary_mul: np.multiply,
    A.binary_div: np.divide, A.binary_max: np.maximum, A.binary_min: np.minimum,
    A.binary_ge: np.greater_equal, A.binary_gt: np.greater, A.binary_le: np.less_equal,
    A.binary_lt: np.less, A.binary_eq: np.equal, A.binary_ne: np.not_equal,
}


def apply_post_ops(dst, ops, prior=None, binary_srcs=None) -> np.ndarray:
    """``dst`` after ``ops`` (a ``pydnnl.post_ops``): sum entries read ``prior`` (the
    destination before the primitive ran), binary entry ``i`` reads ``binary_srcs[i]``
    (numpy-broadcast against ``dst``)."""
    y = np.asarray(dst, np.float64).copy()
    for i in range(ops.len()):
        kind = ops.kind(i)
        if kind == "sum":
            scale, zp, _ = ops.get_params_sum(i)
            y = scale * (np.asarray(prior, np.float64) - zp) + y
        elif kind == "eltwise":
            alg, alpha, beta = ops.get_params_eltwise(i)
            y = np.asarray(eltwise_forward(alg, y, alpha, beta), np.float64)
        elif kind == "prelu":
            w = np.asarray(binary_srcs[i], np.float64)
            y = np.where(y > 0, y, y * w)
        else:
            alg, _ = ops.get_params_binary(i)
            y = _BINARY[algorithm(alg)](y, np.asarray(binary_srcs[i], np.float64)).astype(
                np.float64)
    return y
