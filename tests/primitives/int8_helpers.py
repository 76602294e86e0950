"""Shared pieces of the int8 primitive tests: numpy types, random integer data, attributes."""
from __future__ import annotations

import numpy as np

import pydnnl as dnnl

dt = dnnl.memory.data_type
NP = {dt.u8: np.uint8, dt.s8: np.int8, dt.s32: np.int32, dt.f32: np.float32}


def ints(rng, shape, t):
    """Random integers over the whole range of u8 or s8 type ``t``."""
    lo, hi = (0, 256) if t == dt.u8 else (-128, 128)
    return rng.integers(lo, hi, shape).astype(NP[t])


def quant_attr(scales=None, zps=None, po=None):
    """An attribute with scale masks ``{arg: mask}``, zero-point masks and post-ops."""
    attr = dnnl.primitive_attr()
    for arg, mask in (scales or {}).items():
        attr.set_scales_mask(arg, mask)
    for arg, mask in (zps or {}).items():
        attr.set_zero_points_mask(arg, mask)
    if po is not None:
        attr.set_post_ops(po)
    return attr
