"""numpy reference of oneDNN's binary primitive in float64, from the "Binary" developer guide
(v3): ``dst = (scale0 * src0) op (scale1 * src1)``, either source broadcast along dims of size
1 (numpy broadcasting over tensors of equal rank), comparisons giving 1.0 or 0.0; and the
ternary ``binary_select`` (oneDNN 3.7): ``dst = src2 ? (scale0 * src0) : (scale1 * src1)``, any
non-zero condition value choosing src0, the condition of src0's dims. Post-ops as in
:mod:`pydnnl.reference.post_ops`."""
from __future__ import annotations

import numpy as np

from ..constants import algorithm
from ..error import invalid_arguments

_OPS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "min": np.minimum,
    "ge": np.greater_equal, "gt": np.greater, "le": np.less_equal, "lt": np.less,
    "eq": np.equal, "ne": np.not_equal,
}


def binary(alg, src0, src1, scale0: float = 1.0, scale1: float = 1.0,
           src2=None) -> np.ndarray:
    """``(scale0 * src0) op (scale1 * src1)`` in float64, broadcast to the larger dims;
    for ``binary_select`` ``src2`` (src0's shape) picks ``scale0 * src0`` where non-zero, else
    ``scale1 * src1``."""
    try:
        name = algorithm(int(alg)).name
    except (TypeError, ValueError):
        raise invalid_arguments(f"binary reference: unknown algorithm {alg!r}") from None
    if name == "binary_select":
        if src2 is None:
            raise invalid_arguments("binary reference: binary_select needs src2 (the condition)")
        a = np.asarray(src0, np.float64) * scale0
        b = np.asarray(src1, np.float64) * scale1
        c = np.asarray(src2)
        if c.shape != a.shape or a.ndim != b.ndim:
            raise invalid_arguments(f"binary reference: src2 must have src0's shape {a.shape} "
                                    f"and src1 its rank; got src2 {c.shape}, src1 {b.shape}")
        return np.where(c != 0, a, b).astype(np.float64)
    if not name.startswith("binary_") or name[7:] not in _OPS:
        raise invalid_arguments(f"binary reference: {name} is not a binary algorithm")
    a = np.asarray(src0, np.float64) * scale0
    b = np.asarray(src1, np.float64) * scale1
    if a.ndim != b.ndim:
        raise invalid_arguments(f"binary reference: src0 has {a.ndim} dims, src1 {b.ndim}")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = _OPS[name[7:]](a, b)
    return out.astype(np.float64)
