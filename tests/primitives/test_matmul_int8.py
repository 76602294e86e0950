"""int8 matmul and inner product (u8/s8 src, s8 weights, s32 accumulation) against oneDNN
v3's quantized formula computed in numpy: the product exact in int64, the rest in float64
(:func:`pydnnl.reference.matmul.matmul_int8`), then rounded half to even and saturated into
the dst type (:func:`pydnnl.reference.matmul.quantize`).

Tolerances. s32 dst without a float stage is stored as the exact integer: equality. The
kernel computes the float stages in f32 (the int32 sum converted exactly: |sum| < 2^24 here;
each scale, bias add, post-op and the dst division rounds once), float64 does not, so an
integer dst may land one unit away where the exact value lies within a few f32 ulps of a .5
tie (round half to even on either side of the tie gives neighbours): ``<= 1`` for s8/u8 and
s32 through scales. f32 dst: 16 f32 ulps of the largest magnitude in the chain (about eight
roundings, each at most half an ulp, with margin); bf16/f16: their own half ulp of the value
on top (one rounding of the stored value) plus that f32 bound.
"""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.error import invalid_arguments, unimplemented
from pydnnl.reference.inner_product import inner_product_int8
from pydnnl.reference.matmul import matmul_int8
from pydnnl.reference.post_ops import apply_post_ops

dt = dnnl.memory.data_type
from int8_helpers import check_quantized, ints, quant_attr  # noqa: E402

MD, A = dnnl.memory.desc, dnnl.algorithm
S, Z = dnnl.ARG_ATTR_SCALES, dnnl.ARG_ATTR_ZERO_POINTS
SRC, WEI, DST, BIAS = dnnl.ARG_SRC, dnnl.ARG_WEIGHTS, dnnl.ARG_DST, dnnl.ARG_BIAS
# half an ulp relative to the value: 24, 8 and 11 significant bits
_EPS = {dt.f32: 2.0 ** -24, dt.bf16: 2.0 ** -8, dt.f16: 2.0 ** -11}


def _run(engine, pd, prim, tensors: dict, scales=None, zps=None, ops=None, prior=None):
    """Execute with numpy ``tensors`` by argument, scales (f32) and zero points (s32) by
    argument, post-op operands by index; returns dst as float64."""
    s = dnnl.stream(engine)
    args = {arg: dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, arg), engine, v)
            for arg, v in tensors.items()}
    dmd = pd.dst_desc()
    args[DST] = dnnl.memory(dmd, engine, prior) if prior is not None else dnnl.memory(dmd,
                                                                                       engine)
    for base, vals, t in ((S, scales, np.float32), (Z, zps, np.int32)):
        for arg, v in (vals or {}).items():
            args[base | arg] = dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, base | arg),
                                           engine, np.asarray(v, t).reshape(-1))
    for i, v in (ops or {}).items():
        arg = dnnl.ARG_ATTR_MULTIPLE_POST_OP(i) | dnnl.ARG_SRC_1
        args[arg] = dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, arg), engine, v)
    prim.execute(s, args)
    s.wait()
    return _as_float(args[DST])


def _as_float(mem) -> np.ndarray:
    return mem.to_numpy().astype(np.float64)  # bf16 comes back as f32, f16 as float16


def _check(got, y, t, scale_chain):
    """``got`` (dst of type ``t``) against float64 ``y`` (before conversion); see the module
    docstring. ``scale_chain``: the largest magnitude in the float chain."""
    check_quantized(got, y, t, scale_chain, _EPS.get(t, 0.0))


M, K, N = 13, 37, 21


@pytest.mark.parametrize("src_t,dst_t", [(dt.u8, dt.f32), (dt.s8, dt.s8), (dt.u8, dt.u8),
                                         (dt.u8, dt.s32), (dt.s8, dt.bf16), (dt.u8, dt.f16)],
                         ids=lambda t: t.name)
def test_matmul_int8_dst_types(engine, src_t, dst_t):
    """Scales src common, weights per N, dst common; zero points on src and dst (and weights
    for s8 src); an f32 bias."""
    rng = np.random.default_rng(int(src_t) * 7 + int(dst_t))
    x, w = ints(rng, (M, K), src_t), ints(rng, (K, N), dt.s8)
    bias = rng.standard_normal((1, N)).astype(np.float32) * 8
    zps = {SRC: 3 if src_t == dt.s8 else 128, DST: 5 if dst_t != dt.s8 else -4}
    if src_t == dt.s8:
        zps[WEI] = -2
    sc = {SRC: np.float32(0.05), WEI: rng.uniform(0.01, 0.03, N).astype(np.float32),
          DST: np.float32(0.5)}
    attr = quant_attr({SRC: 0, WEI: 2, DST: 0}, {a: 0 for a in zps})
    pd = dnnl.matmul.primitive_desc(engine, MD([M, K], src_t, "ab"), MD([K, N], dt.s8, "ab"),
                                    MD([1, N], dt.f32, "ab"), MD([M, N], dst_t, "ab"), attr)
    assert pd.impl_info_str().startswith("gemm_int8") if hasattr(pd, "impl_info_str") else True
    got = _run(engine, pd, dnnl.matmul(pd), {SRC: x, WEI: w, BIAS: bias}, sc, zps)
    y = matmul_int8(x, w, bias, sc[SRC], sc[WEI], sc[DST], zps[SRC], zps.get(WEI, 0),
                    zps[DST])
    _check(got, y, dst_t, np.abs(y).max() * float(sc[DST]) + np.abs(bias).max())


def test_matmul_int8_s32_exact(engine):
    """u8 x s8 -> s32 with zero points on all three and an s32 bias: exact."""
    rng = np.random.default_rng(5)
    x, w = ints(rng, (M, K), dt.u8), ints(rng, (K, N), dt.s8)
    bias = rng.integers(-1000, 1000, (M, N)).astype(np.int32)
    zps = {SRC: 77, WEI: -3, DST: 1000}
    attr = quant_attr(zps={a: 0 for a in zps})
    pd = dnnl.matmul.primitive_desc(engine, MD([M, K], dt.u8, "ab"), MD([K, N], dt.s8, "ab"),
                                    MD([M, N], dt.s32, "ab"), MD([M, N], dt.s32, "ab"), attr)
    got = _run(engine, pd, dnnl.matmul(pd), {SRC: x, WEI: w, BIAS: bias}, zps=zps)
    want = (x.astype(np.int64) - 77) @ (w.astype(np.int64) + 3) + bias + 1000
    assert np.array_equal(got, want)


def test_matmul_int8_post_ops(first_engine):
    """sum with a zero point, eltwise and a per-row binary add, s8 dst, weights and dst zero
    points per column N."""
    eng = first_engine
    rng = np.random.default_rng(11)
    x, w = ints(rng, (M, K), dt.u8), ints(rng, (K, N), dt.s8)
    prior = ints(rng, (M, N), dt.s8)
    po = dnnl.post_ops()
    po.append_sum(0.5, 3)
    po.append_eltwise(A.eltwise_clip, -20.0, 30.0)
    po.append_binary(A.binary_add, MD([M, 1], dt.f32, "ab"))
    ops = {2: rng.standard_normal((M, 1)).astype(np.float32) * 4}
    zps = {SRC: 100, WEI: rng.integers(-3, 4, N), DST: rng.integers(-5, 6, N)}
    sc = {SRC: np.float32(0.02), WEI: np.float32(0.04)}
    attr = quant_attr({SRC: 0, WEI: 0}, {SRC: 0, WEI: 2, DST: 2}, po)
    pd = dnnl.matmul.primitive_desc(eng, MD([M, K], dt.u8, "ab"), MD([K, N], dt.s8, "ab"),
                                    MD([M, N], dt.s8, "ab"), attr)
    got = _run(eng, pd, dnnl.matmul(pd), {SRC: x, WEI: w}, sc, zps, ops, prior)
    y = matmul_int8(x, w, None, sc[SRC], sc[WEI], 1.0, zps[SRC], zps[WEI], zps[DST],
                    post_ops=lambda v: apply_post_ops(v, po, prior, ops))
    _check(got, y, dt.s8, 64.0)


@pytest.mark.parametrize("sdims,wdims", [((3, M, K), (1, K, N)), ((2, 1, M, K), (1, 3, K, N))],
                         ids=["folded", "per-entry"])
def test_matmul_int8_batched(first_engine, sdims, wdims):
    """Batched with broadcast weights (one launch), and batch dims that fold into no stride
    (one GEMM per entry); a binary operand per batch entry; s32 dst through a scale."""
    eng = first_engine
    rng = np.random.default_rng(len(sdims))
    x, w = ints(rng, sdims, dt.s8), ints(rng, wdims, dt.s8)
    ddims = tuple(max(a, b) for a, b in zip(sdims[:-2], wdims[:-2])) + (M, N)
    nd = len(ddims)
    bdims = ddims[:-2] + (1, 1)
    po = dnnl.post_ops()
    po.append_binary(A.binary_mul, MD(list(bdims), dt.f32, "abcd"[:nd]))
    ops = {0: rng.uniform(0.5, 2, bdims).astype(np.float32)}
    tag = "abcd"[:nd]
    attr = quant_attr({SRC: 0}, {SRC: 0}, po)
    pd = dnnl.matmul.primitive_desc(eng, MD(list(sdims), dt.s8, tag), MD(list(wdims), dt.s8, tag),
                                    MD(list(ddims), dt.s32, tag), attr)
    got = _run(eng, pd, dnnl.matmul(pd), {SRC: x, WEI: w}, {SRC: 0.5}, {SRC: -7}, ops)
    y = matmul_int8(x, w, None, 0.5, zp_src=-7, post_ops=lambda v: v * ops[0])
    _check(got, y, dt.s32, np.abs(y).max())


def test_matmul_int8_transposed(first_engine):
    """src and weights transposed in memory (strides), dst plain."""
    eng = first_engine
    rng = np.random.default_rng(2)
    x, w = ints(rng, (M, K), dt.u8), ints(rng, (K, N), dt.s8)
    smd = MD([M, K], dt.u8, "ba")
    wmd = MD([K, N], dt.s8, "ba")
    attr = quant_attr(zps={SRC: 0, WEI: 0})
    pd = dnnl.matmul.primitive_desc(eng, smd, wmd, MD([M, N], dt.s32, "ab"), attr)
    s = dnnl.stream(eng)
    mem = {SRC: dnnl.memory(smd, eng, x), WEI: dnnl.memory(wmd, eng, w),  # stored transposed
           DST: dnnl.memory(pd.dst_desc(), eng)}
    for arg, v in ((SRC, 9), (WEI, 4)):
        mem[Z | arg] = dnnl.memory(MD([1], dt.s32, "a"), eng, np.array([v], np.int32))
    dnnl.matmul(pd).execute(s, mem)
    s.wait()
    want = (x.astype(np.int64) - 9) @ (w.astype(np.int64) - 4)
    assert np.array_equal(mem[DST].to_numpy(), want)


def test_matmul_int8_errors(first_engine):
    """Unsupported types and masks raise naming the argument; a missing zero point at
    execute raises before dst is written."""
    eng = first_engine
    u8, s8 = MD([M, K], dt.u8, "ab"), MD([K, N], dt.s8, "ab")
    dst = MD([M, N], dt.s8, "ab")
    with pytest.raises(unimplemented, match="weights"):
        dnnl.matmul.primitive_desc(eng, u8, MD([K, N], dt.u8, "ab"), dst)
    with pytest.raises(unimplemented, match="dst"):
        dnnl.matmul.primitive_desc(eng, u8, s8, MD([M, N], dt.f64, "ab"))
    with pytest.raises(unimplemented, match="ARG_SRC"):
        dnnl.matmul.primitive_desc(eng, u8, s8, dst, quant_attr(zps={SRC: 2}))  # per K
    with pytest.raises(unimplemented, match="ARG_DST"):
        dnnl.matmul.primitive_desc(eng, u8, s8, dst, quant_attr(zps={DST: 1}))  # per M
    with pytest.raises(unimplemented, match="ARG_WEIGHTS"):
        dnnl.matmul.primitive_desc(eng, u8, s8, dst, quant_attr({WEI: 1}))  # scales per K
    with pytest.raises(unimplemented, match="zero points"):  # f32: no zero points
        dnnl.matmul.primitive_desc(eng, MD([M, K], dt.f32, "ab"), MD([K, N], dt.f32, "ab"),
                                   MD([M, N], dt.f32, "ab"), quant_attr(zps={SRC: 0}))
    pd = dnnl.matmul.primitive_desc(eng, u8, s8, dst, quant_attr(zps={SRC: 0}))
    s = dnnl.stream(eng)
    before = np.full((M, N), 42, np.int8)
    d = dnnl.memory(dst, eng, before)
    with pytest.raises(invalid_arguments, match="ZERO_POINTS"):
        dnnl.matmul(pd).execute(s, {SRC: dnnl.memory(u8, eng), WEI: dnnl.memory(s8, eng),
                                    DST: d})
    s.wait()
    assert np.array_equal(d.to_numpy(), before)


# {{{ inner product

def test_inner_product_int8(engine):
    """u8 [N, IC, H, W] . s8 weights (any: plain) -> s8 with a per-output-channel weights
    scale, an s32 bias and a relu."""
    rng = np.random.default_rng(8)
    mb, ic, hw, oc = 5, 3, 3, 17
    x, w = ints(rng, (mb, ic, hw, hw), dt.u8), ints(rng, (oc, ic, hw, hw), dt.s8)
    bias = rng.integers(-200, 200, oc).astype(np.int32)
    sc = {SRC: np.float32(0.03), WEI: rng.uniform(0.01, 0.05, oc).astype(np.float32),
          DST: np.float32(0.25)}
    po = dnnl.post_ops()
    po.append_eltwise(A.eltwise_relu, 0.0, 0.0)
    attr = quant_attr({SRC: 0, WEI: 1, DST: 0}, po=po)
    pd = dnnl.inner_product_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_inference, MD([mb, ic, hw, hw], dt.u8, "abcd"),
        MD([oc, ic, hw, hw], dt.s8, "any"), MD([oc], dt.s32, "a"), MD([mb, oc], dt.s8, "ab"),
        attr)
    got = _run(engine, pd, dnnl.inner_product_forward(pd), {SRC: x, WEI: w, BIAS: bias}, sc)
    y = inner_product_int8(x, w, bias, sc[SRC], sc[WEI], sc[DST],
                           post_ops=lambda v: np.maximum(v, 0))
    _check(got, y, dt.s8, 256.0)


def test_inner_product_int8_errors(first_engine):
    eng = first_engine
    src, wei = MD([4, 8], dt.u8, "ab"), MD([6, 8], dt.s8, "ab")
    fwd = dnnl.prop_kind.forward_inference
    with pytest.raises(unimplemented, match="zero points"):
        dnnl.inner_product_forward.primitive_desc(eng, fwd, src, wei, MD([4, 6], dt.s8, "ab"),
                                                  quant_attr(zps={SRC: 0}))
    with pytest.raises(unimplemented, match="dst_desc data type f16"):
        dnnl.inner_product_forward.primitive_desc(eng, fwd, src, wei, MD([4, 6], dt.f16, "ab"))
    with pytest.raises(unimplemented, match="weights_desc"):
        dnnl.inner_product_forward.primitive_desc(eng, fwd, src, MD([6, 8], dt.f32, "ab"),
                                                  MD([4, 6], dt.f32, "ab"))
