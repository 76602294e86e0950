"""Shared pieces of the int8 primitive tests: numpy types, random integer data, attributes."""
from __future__ import annotations

import numpy as np

import pydnnl as dnnl
from pydnnl.reference.matmul import quantize

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


def run_int8(primitive, engine, pd, tensors, scales=None, zps=None, ops=None, prior=None):
    """Execute ``primitive(pd)`` with numpy ``tensors`` (logical dims) by argument, runtime
    scales / zero points ``{arg: values}``, binary post-op operands ``{index: array}`` and a
    ``prior`` dst (for sum); returns dst as float64 in logical dims."""
    s = dnnl.stream(engine)

    def filled(md, v):
        return dnnl.memory(md, engine, np.ascontiguousarray(v))

    args = {arg: filled(pd.query_md(dnnl.query.exec_arg_md, arg), v)
            for arg, v in tensors.items()}
    dmd = pd.dst_desc()
    args[dnnl.ARG_DST] = filled(dmd, prior) if prior is not None else dnnl.memory(dmd, engine)
    for base, vals, t in ((dnnl.ARG_ATTR_SCALES, scales, np.float32),
                          (dnnl.ARG_ATTR_ZERO_POINTS, zps, np.int32)):
        for arg, v in (vals or {}).items():
            args[base | arg] = dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, base | arg),
                                           engine, np.asarray(v, t).reshape(-1))
    for i, v in (ops or {}).items():
        arg = dnnl.ARG_ATTR_MULTIPLE_POST_OP(i) | dnnl.ARG_SRC_1
        args[arg] = filled(pd.query_md(dnnl.query.exec_arg_md, arg), v)
    primitive(pd).execute(s, args)
    s.wait()
    return args[dnnl.ARG_DST].to_numpy().astype(np.float64)


def check_quantized(got, y, t, scale_chain, eps=0.0):
    """``got`` (a dst of integer or float type ``t``, as float64) against the float64 value
    ``y`` before conversion: an integer dst is ``y`` rounded half to even and saturated, one
    unit off at most next to a .5 tie (f32 float stages may land either side); a float dst
    within 16 f32 ulps of ``scale_chain``, the largest magnitude in the float chain, plus
    ``eps`` relative (a bf16/f16 dst's rounding)."""
    want = quantize(y, t.name)
    if t in (dt.s8, dt.u8, dt.s32):
        assert np.abs(got - want).max() <= 1, np.abs(got - want).max()
        tie = np.abs(np.abs(y - np.floor(y)) - 0.5) < 1e-4 * max(1.0, np.abs(y).max())
        assert np.array_equal(got[~tie], want[~tie])
        return
    tol = 16 * 2.0 ** -24 * scale_chain + eps * np.abs(y)
    assert np.all(np.abs(got - y) <= tol), np.abs(got - y).max()
