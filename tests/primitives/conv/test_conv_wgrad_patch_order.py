"""Backward weights into ``[Kf, OCg]`` weights (channels-last activations, ``hwio``-like
weights) in both patch orders of the im2col solver: transposed ``[Kf, points]`` patches read
as a plain A (CPUs' rule) and the forward's ``[points, Kf]`` order read as a transposed A
(GPUs' rule, where a dense 1x1 layer reads its source in place, with no copy). The rule is
forced both ways on every device, against the float64 reference."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
import pydnnl.primitives.conv.solvers.im2col_gemm as solver
from pydnnl.reference import conv as R
from pydnnl.runtime.heuristics.conv import wgrad_kmajor_patches

MD, F32 = dnnl.memory.desc, dnnl.memory.data_type.f32

# (mb, ic, oc, ih, iw, k, stride, dilate, pad, groups)
CASES = {
    "1x1": (3, 24, 16, 5, 7, 1, 1, 0, 0, 1),
    "1x1_strided": (2, 8, 12, 7, 6, 1, 2, 0, 0, 1),
    "3x3": (2, 8, 20, 6, 5, 3, 1, 0, 1, 1),
    "3x3_s2_dilated": (1, 12, 8, 9, 8, 3, 2, 1, 1, 1),
    "3x3_grouped": (2, 8, 12, 5, 5, 3, 1, 0, 1, 2),
}


def _run(engine, stream, case, with_bias):
    mb, ic, oc, ih, iw, k, s, d, pad, g = CASES[case]
    oh = (ih + 2 * pad - (d + 1) * (k - 1) - 1) // s + 1
    ow = (iw + 2 * pad - (d + 1) * (k - 1) - 1) // s + 1
    rng = np.random.default_rng(sum(map(ord, case)))
    x = rng.standard_normal((mb, ic, ih, iw)).astype(np.float32)
    dy = rng.standard_normal((mb, oc, oh, ow)).astype(np.float32)
    wdims = [g, oc // g, ic // g, k, k] if g > 1 else [oc, ic, k, k]
    wtag = "adecb" if g > 1 else "hwio"  # (per group [kh, kw, ic, oc])
    args = ([s, s], [d, d], [pad, pad], [pad, pad])
    src, dst = MD(list(x.shape), F32, "nhwc"), MD(list(dy.shape), F32, "nhwc")
    bias = MD([oc], F32, "x") if with_bias else None
    fwd = dnnl.convolution_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_training, dnnl.algorithm.convolution_direct, src,
        MD(wdims, F32, wtag), bias, dst, *args, solver="im2col_gemm")
    pd = dnnl.convolution_backward_weights.primitive_desc(
        engine, dnnl.algorithm.convolution_direct, src, MD(wdims, F32, wtag), bias, dst,
        *args, fwd, solver="im2col_gemm")
    prim = dnnl.convolution_backward_weights(pd)
    names = [getattr(getattr(st, "kernel", None), "name", "") for st in prim._plan.steps]
    dw = dnnl.memory(pd.diff_weights_desc(), engine)
    margs = {dnnl.ARG_SRC: dnnl.memory(src, engine, x),
             dnnl.ARG_DIFF_DST: dnnl.memory(dst, engine, dy), dnnl.ARG_DIFF_WEIGHTS: dw}
    db = None
    if with_bias:
        db = dnnl.memory(pd.diff_bias_desc(), engine)
        margs[dnnl.ARG_DIFF_BIAS] = db
    prim.execute(stream, margs)
    stream.wait()
    want_w, want_b = R.conv_backward_weights(x, dy, wdims, *args, groups=g,
                                             with_bias=with_bias, dtype=np.float64)
    got = dw.to_numpy().reshape(want_w.shape)
    assert np.abs(got - want_w).max() <= 1e-5 * np.abs(want_w).max(), case
    if with_bias:
        got_b = db.to_numpy()
        assert np.abs(got_b - want_b).max() <= 1e-5 * np.abs(want_b).max()
    return names


@pytest.mark.parametrize("kmajor", [True, False], ids=["kmajor", "points_major"])
@pytest.mark.parametrize("case", list(CASES))
def test_both_patch_orders_match_reference(engine, stream, monkeypatch, case, kmajor):
    monkeypatch.setattr(solver, "wgrad_kmajor_patches", lambda info, kf: kmajor)
    names = _run(engine, stream, case, with_bias=case == "3x3")
    copies = [n for n in names if "im2col" in n or n == "transpose8"]
    if case == "1x1" and not kmajor:
        assert not copies, names  # the source itself is the GEMM's A
    else:
        assert copies, names


def test_rule_follows_the_device(engine):
    gpu = engine.info.is_gpu
    assert wgrad_kmajor_patches(engine.info, 64) == (not gpu)
    assert wgrad_kmajor_patches(engine.info, 147)  # a transposed A's float4s along m
    assert wgrad_kmajor_patches(None, 64)  # dry plans reserve the patch matrix
