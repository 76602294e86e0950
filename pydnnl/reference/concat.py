"""numpy reference of oneDNN's concat primitive, from the "Concat" developer guide: dst holds
the sources one after the other along ``concat_dimension`` (element by element, no
arithmetic)."""
from __future__ import annotations

import numpy as np

from ..error import invalid_arguments


def concat(axis: int, srcs) -> np.ndarray:
    """The sources placed along ``axis`` (float64), written as index arithmetic rather than
    ``np.concatenate``: dst index ``c`` on the axis comes from source ``k`` at ``c - start_k``."""
    srcs = [np.asarray(s, np.float64) for s in srcs]
    if not srcs:
        raise invalid_arguments("concat reference: no sources")
    nd = srcs[0].ndim
    if not 0 <= axis < nd:
        raise invalid_arguments(f"concat reference: axis {axis} outside [0, {nd})")
    shape = list(srcs[0].shape)
    shape[axis] = sum(s.shape[axis] for s in srcs)
    out = np.empty(shape, np.float64)
    start = 0
    for i, s in enumerate(srcs):
        other = [v for d, v in enumerate(s.shape) if d != axis]
        want = [v for d, v in enumerate(srcs[0].shape) if d != axis]
        if s.ndim != nd or other != want:
            raise invalid_arguments(f"concat reference: srcs[{i}] shape {s.shape} does not fit "
                                    f"srcs[0] shape {srcs[0].shape} off axis {axis}")
        sel = [slice(None)] * nd
        sel[axis] = slice(start, start + s.shape[axis])
        out[tuple(sel)] = s
        start += s.shape[axis]
    return out
