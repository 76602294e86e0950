"""numpy reference of oneDNN's sum primitive in float64, from the "Sum" developer guide:
``dst = sum_i scales[i] * src_i`` over sources of one shape (no broadcast)."""
from __future__ import annotations

import numpy as np

from ..error import invalid_arguments


def sum_(scales, srcs) -> np.ndarray:
    """``sum_i scales[i] * srcs[i]`` in float64."""
    srcs = [np.asarray(s, np.float64) for s in srcs]
    if len(srcs) == 0 or len(scales) != len(srcs):
        raise invalid_arguments(f"sum reference: {len(scales)} scales for {len(srcs)} sources")
    shape = srcs[0].shape
    out = np.zeros(shape, np.float64)
    for i, (s, x) in enumerate(zip(scales, srcs)):
        if x.shape != shape:
            raise invalid_arguments(f"sum reference: srcs[{i}] shape {x.shape} differs from "
                                    f"srcs[0] shape {shape}")
        out += float(s) * x
    return out
