"""int8 convolution forward (u8/s8 src, s8 weights, s32 accumulation) against oneDNN v3's
quantized formula in numpy: the accumulator exact in int64, the rest in float64
(:func:`pydnnl.reference.conv_int8.conv_int8`, padded taps skipped as oneDNN's reference does),
then rounded half to even and saturated into dst's type
(:func:`pydnnl.reference.matmul.quantize`).

Tolerances. s32 dst without a float stage is the exact integer: equality. The kernel computes
the float stages in f32 (the int32 sum converts exactly: |sum| < 2^24 here; each scale, bias
add, post-op and the dst division rounds once), float64 does not, so an integer dst may land
one unit away only where the exact value lies within a few f32 ulps of a .5 tie (rounding half
to even on either side of the tie gives neighbours): ``<= 1`` there, equality elsewhere. f32
dst: 16 f32 ulps of the largest magnitude in the chain (about eight roundings of at most half
an ulp each, with margin).
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.error import invalid_arguments, unimplemented
from pydnnl.reference.conv_int8 import conv_int8, conv_int8_acc
from pydnnl.reference.eltwise import eltwise_forward

dt = dnnl.memory.data_type
sys.path.insert(0, str(pathlib.Path(__file__).parents[1]))
from int8_helpers import check_quantized, ints, quant_attr, run_int8  # noqa: E402

MD, A, PK = dnnl.memory.desc, dnnl.algorithm, dnnl.prop_kind
S, Z = dnnl.ARG_ATTR_SCALES, dnnl.ARG_ATTR_ZERO_POINTS
SRC, WEI, DST, BIAS = dnnl.ARG_SRC, dnnl.ARG_WEIGHTS, dnnl.ARG_DST, dnnl.ARG_BIAS
_ACT = {1: {"nchw": "abc", "nhwc": "acb"}, 2: {"nchw": "abcd", "nhwc": "acdb"},
        3: {"nchw": "abcde", "nhwc": "acdeb"}}


def _out(i, k, s, pl, pr, d=0):
    return (i + pl + pr - ((k - 1) * (d + 1) + 1)) // s + 1


def _problem(engine, src_t, dst_t, mb=2, g=1, ic=4, oc=6, sp=(7, 6), k=(3, 3), s=(2, 1),
             p=(1, 1), act="nchw", bias_t=None, attr=None, dil=None):
    nsp = len(sp)
    dsp = tuple(_out(i, kk, ss, pp, pp, (dil or (0,) * nsp)[j])
                for j, (i, kk, ss, pp) in enumerate(zip(sp, k, s, p)))
    wdims = ([g, oc // g, ic // g] if g > 1 else [oc, ic]) + list(k)
    tag = _ACT[nsp][act]
    args = [engine, PK.forward_inference, A.convolution_direct, MD([mb, ic, *sp], src_t, tag),
            MD(wdims, dt.s8, "any")]
    if bias_t is not None:
        args.append(MD([oc], bias_t, "a"))
    args += [MD([mb, oc, *dsp], dst_t, tag), list(s)]
    if dil is not None:
        args.append(list(dil))
    args += [list(p), list(p)]
    pd = dnnl.convolution_forward.primitive_desc(*args, attr=attr)
    return pd, wdims, dsp


def _run(engine, pd, tensors, scales=None, zps=None, ops=None, prior=None):
    """Execute with numpy ``tensors`` (logical dims) by argument; dst as float64."""
    return run_int8(dnnl.convolution_forward, engine, pd, tensors, scales, zps, ops, prior)


_check = check_quantized


def test_conv_int8_s32_exact(engine):
    """u8 src, s32 dst, no float stage: the exact integer, strided and padded, nchw."""
    rng = np.random.default_rng(1)
    pd, wdims, dsp = _problem(engine, dt.u8, dt.s32)
    x, w = ints(rng, (2, 4, 7, 6), dt.u8), ints(rng, wdims, dt.s8)
    got = _run(engine, pd, {SRC: x, WEI: w})
    assert np.array_equal(got, conv_int8_acc(x, w, (2, 1), (1, 1), dsp).astype(np.float64))


def test_conv_int8_zero_points_padding_exact(engine):
    """A src zero point with padding: padded taps contribute nothing (oneDNN's reference
    skips them); s32 bias and dst zero point added in int32: exact. nhwc, s8 src."""
    rng = np.random.default_rng(2)
    attr = quant_attr(zps={SRC: 0, DST: 0})
    pd, wdims, dsp = _problem(engine, dt.s8, dt.s32, act="nhwc", bias_t=dt.s32, attr=attr,
                              s=(1, 2), p=(2, 1))
    x, w = ints(rng, (2, 4, 7, 6), dt.s8), ints(rng, wdims, dt.s8)
    bias = rng.integers(-1000, 1000, 6).astype(np.int32)
    got = _run(engine, pd, {SRC: x, WEI: w, BIAS: bias}, zps={SRC: -7, DST: 11})
    want = conv_int8_acc(x, w, (1, 2), (2, 1), dsp, zp_src=-7) + bias.reshape(1, -1, 1, 1) + 11
    assert np.array_equal(got, want.astype(np.float64))


# per-channel zero points (oneDNN's mask 2: src per input channel, dst per output channel):
# (src type, groups, ic, oc, activation layout, dst zero point mask, kernel, strides, padding)
PER_CHANNEL = [
    (dt.u8, 1, 5, 6, "nchw", 2, (3, 3), (2, 1), (1, 1)),
    (dt.s8, 1, 4, 3, "nhwc", 0, (3, 2), (1, 2), (2, 1)),
    (dt.u8, 2, 6, 4, "nhwc", 2, (3, 3), (2, 2), (1, 1)),  # grouped: zp[g * ICg + ic]
    (dt.s8, 3, 3, 3, "nchw", 2, (3, 3), (1, 1), (1, 1)),  # depthwise
    (dt.u8, 1, 7, 5, "nhwc", 2, (1, 1), (1, 1), (0, 0)),  # 1x1: the GEMM reads src itself
]


@pytest.mark.parametrize("src_t,g,ic,oc,act,dst_mask,k,s,p", PER_CHANNEL,
                         ids=[f"{c[0].name}-g{c[1]}-{c[4]}-dst{c[5]}-k{c[6][0]}x{c[6][1]}"
                              for c in PER_CHANNEL])
def test_conv_int8_per_channel_zero_points_exact(engine, src_t, g, ic, oc, act, dst_mask, k,
                                                  s, p):
    """Src zero points per input channel (each padded tap holds its own channel's, so it
    cancels) and dst zero points per output channel or common, s32 dst with an s32 bias: the
    exact integer against int64 numpy, padded, strided and grouped problems included."""
    rng = np.random.default_rng(ic * 10 + oc + g)
    attr = quant_attr(zps={SRC: 2, DST: dst_mask})
    pd, wdims, dsp = _problem(engine, src_t, dt.s32, g=g, ic=ic, oc=oc, k=k, s=s, p=p,
                              act=act, bias_t=dt.s32, attr=attr)
    assert list(pd.query_md(dnnl.query.exec_arg_md, Z | SRC).dims) == [ic]
    assert list(pd.query_md(dnnl.query.exec_arg_md, Z | DST).dims) == [oc if dst_mask else 1]
    x, w = ints(rng, (2, ic, 7, 6), src_t), ints(rng, wdims, dt.s8)
    lo, hi = (0, 256) if src_t == dt.u8 else (-128, 128)  # representable: padding cancels
    zs = rng.integers(lo, hi, ic).astype(np.int32)
    zd = rng.integers(-300, 300, oc if dst_mask else 1).astype(np.int32)
    bias = rng.integers(-1000, 1000, oc).astype(np.int32)
    got = _run(engine, pd, {SRC: x, WEI: w, BIAS: bias}, zps={SRC: zs, DST: zd})
    want = conv_int8_acc(x, w, s, p, dsp, groups=g, zp_src=zs) + bias.reshape(1, -1, 1, 1)
    want = want + (zd.reshape(1, -1, 1, 1) if dst_mask else zd[0])
    assert np.array_equal(got, want.astype(np.float64))


def test_conv_int8_per_channel_zero_points_scaled_u8_dst(engine):
    """Per-channel src and dst zero points in the float path: scales (weights per output
    channel), an f32 bias, u8 dst; the zero points need not fit src's type without padding."""
    rng = np.random.default_rng(21)
    attr = quant_attr({SRC: 0, WEI: 1, DST: 0}, {SRC: 2, DST: 2})
    pd, wdims, dsp = _problem(engine, dt.u8, dt.u8, ic=6, oc=5, k=(2, 2), s=(1, 1), p=(0, 0),
                              act="nhwc", bias_t=dt.f32, attr=attr)
    x, w = ints(rng, (2, 6, 7, 6), dt.u8), ints(rng, wdims, dt.s8)
    zs = rng.integers(-400, 400, 6).astype(np.int32)  # outside u8: no padding to fill
    zd = rng.integers(0, 256, 5).astype(np.int32)
    bias = (rng.standard_normal(5) * 8).astype(np.float32)
    sc = {SRC: np.float32(0.02), WEI: rng.uniform(0.01, 0.03, 5).astype(np.float32),
          DST: np.float32(2.0)}
    got = _run(engine, pd, {SRC: x, WEI: w, BIAS: bias}, sc, {SRC: zs, DST: zd})
    y = conv_int8(x, w, (1, 1), (0, 0), dsp, bias=bias, src_scale=sc[SRC], wei_scale=sc[WEI],
                  dst_scale=sc[DST], zp_src=zs, zp_dst=zd)
    _check(got, y, dt.u8, np.abs(y).max() * float(sc[DST]) + np.abs(bias).max() + 255)


@pytest.mark.parametrize("src_t,dst_t,act", [(dt.u8, dt.f32, "nchw"), (dt.s8, dt.s8, "nhwc"),
                                             (dt.u8, dt.u8, "nhwc"), (dt.s8, dt.s32, "nchw")],
                         ids=lambda v: getattr(v, "name", v))
def test_conv_int8_dst_types(engine, src_t, dst_t, act):
    """Scales src common, weights per output channel, dst common; src and dst zero points;
    an f32 bias."""
    rng = np.random.default_rng(int(src_t) * 7 + int(dst_t))
    attr = quant_attr({SRC: 0, WEI: 1, DST: 0}, {SRC: 0, DST: 0})
    pd, wdims, dsp = _problem(engine, src_t, dst_t, act=act, bias_t=dt.f32, attr=attr)
    x, w = ints(rng, (2, 4, 7, 6), src_t), ints(rng, wdims, dt.s8)
    bias = (rng.standard_normal(6) * 8).astype(np.float32)
    zps = {SRC: 128 if src_t == dt.u8 else 3, DST: -4 if dst_t == dt.s8 else 5}
    sc = {SRC: np.float32(0.05), WEI: rng.uniform(0.01, 0.03, 6).astype(np.float32),
          DST: np.float32(0.5) if dst_t != dt.f32 else np.float32(2.0)}
    got = _run(engine, pd, {SRC: x, WEI: w, BIAS: bias}, sc, zps)
    y = conv_int8(x, w, (2, 1), (1, 1), dsp, bias=bias, src_scale=sc[SRC], wei_scale=sc[WEI],
                  dst_scale=sc[DST], zp_src=zps[SRC], zp_dst=zps[DST])
    _check(got, y, dst_t, np.abs(y).max() * float(sc[DST]) + np.abs(bias).max())


@pytest.mark.parametrize("g,ic,oc,act", [(2, 4, 6, "nhwc"), (6, 6, 6, "nchw")],
                         ids=["grouped-nhwc", "depthwise-nchw"])
def test_conv_int8_groups_per_oc(engine, g, ic, oc, act):
    """Grouped and depthwise weights with per-output-channel scales (mask 3 over
    [G, OCg]), u8 src, s8 dst."""
    rng = np.random.default_rng(g)
    attr = quant_attr({WEI: 3, DST: 0}, {SRC: 0})
    pd, wdims, dsp = _problem(engine, dt.u8, dt.s8, g=g, ic=ic, oc=oc, act=act, attr=attr)
    x, w = ints(rng, (2, ic, 7, 6), dt.u8), ints(rng, wdims, dt.s8)
    sc = {WEI: rng.uniform(0.002, 0.01, oc).astype(np.float32), DST: np.float32(0.25)}
    got = _run(engine, pd, {SRC: x, WEI: w}, sc, {SRC: 100})
    y = conv_int8(x, w, (2, 1), (1, 1), dsp, groups=g, wei_scale=sc[WEI], dst_scale=sc[DST],
                  zp_src=100)
    _check(got, y, dt.s8, np.abs(y).max() * float(sc[DST]))


def test_conv_int8_1x1_nhwc_and_3d(engine):
    """A 1x1 stride-1 nhwc convolution (u8 -> u8) and a dilated 3-D one (s8 -> f32)."""
    rng = np.random.default_rng(4)
    attr = quant_attr({SRC: 0, DST: 0})
    pd, wdims, dsp = _problem(engine, dt.u8, dt.u8, ic=8, oc=5, sp=(5, 4), k=(1, 1), s=(1, 1),
                              p=(0, 0), act="nhwc", attr=attr)
    x, w = ints(rng, (2, 8, 5, 4), dt.u8), ints(rng, wdims, dt.s8)
    sc = {SRC: np.float32(0.01), DST: np.float32(0.1)}
    got = _run(engine, pd, {SRC: x, WEI: w}, sc)
    y = conv_int8(x, w, (1, 1), (0, 0), dsp, src_scale=sc[SRC], dst_scale=sc[DST])
    _check(got, y, dt.u8, np.abs(y).max() * float(sc[DST]))
    # grouped 1x1 over channels-last src: the GEMM reads src itself (no im2col bytes)
    pd, wdims, dsp = _problem(engine, dt.s8, dt.s32, g=2, ic=8, oc=6, sp=(5, 4), k=(1, 1),
                              s=(1, 1), p=(0, 0), act="nhwc")
    assert "im2col" not in dnnl.convolution_forward(pd)._plan.describe()
    x, w = ints(rng, (2, 8, 5, 4), dt.s8), ints(rng, wdims, dt.s8)
    got = _run(engine, pd, {SRC: x, WEI: w})
    want = conv_int8_acc(x, w, (1, 1), (0, 0), dsp)
    assert np.array_equal(got, want.astype(np.float64))
    pd, wdims, dsp = _problem(engine, dt.s8, dt.f32, mb=1, ic=3, oc=4, sp=(5, 6, 5),
                              k=(2, 3, 2), s=(1, 2, 1), p=(1, 1, 0), dil=(1, 0, 0))
    x, w = ints(rng, (1, 3, 5, 6, 5), dt.s8), ints(rng, wdims, dt.s8)
    got = _run(engine, pd, {SRC: x, WEI: w})
    want = conv_int8_acc(x, w, (1, 2, 1), (1, 1, 0), dsp, dilates=(1, 0, 0))
    assert np.array_equal(got, want.astype(np.float64))  # |acc| < 2^24: f32 holds it


def test_conv_int8_post_op_chain(engine):
    """relu, then sum (scale 0.5) over the prior u8 dst, then a per-channel binary add, with
    scales, 1-D nchw, s8 src -> u8 dst."""
    rng = np.random.default_rng(6)
    po = dnnl.post_ops()
    po.append_eltwise(A.eltwise_relu, 0.0, 0.0)
    po.append_sum(0.5)
    po.append_binary(A.binary_add, MD([1, 6, 1], dt.f32, "abc"))
    attr = quant_attr({SRC: 0, WEI: 0, DST: 0}, po=po)
    pd, wdims, dsp = _problem(engine, dt.s8, dt.u8, sp=(11,), k=(3,), s=(2,), p=(1,),
                              attr=attr)
    x, w = ints(rng, (2, 4, 11), dt.s8), ints(rng, wdims, dt.s8)
    prior = ints(rng, (2, 6) + dsp, dt.u8)
    add = (rng.standard_normal((1, 6, 1)) * 4).astype(np.float32)
    sc = {SRC: np.float32(0.03), WEI: np.float32(0.02), DST: np.float32(0.25)}
    got = _run(engine, pd, {SRC: x, WEI: w}, sc, ops={2: add}, prior=prior)

    def chain(v):
        v = eltwise_forward(A.eltwise_relu, v, 0.0, 0.0)
        return v + 0.5 * prior.astype(np.float64) + add.astype(np.float64)
    y = conv_int8(x, w, (2,), (1,), dsp, src_scale=sc[SRC], wei_scale=sc[WEI],
                  dst_scale=sc[DST], post_ops=chain)
    _check(got, y, dt.u8, np.abs(y).max() * float(sc[DST]) + 255)


@pytest.mark.parametrize("case", ["weights-u8", "wei-mask-2", "wei-zp", "src-zp-per-mb",
                                  "dst-zp-mask-3", "winograd", "deconvolution",
                                  "backward-data"])
def test_conv_int8_refusals(engine, case):
    """What oneDNN's int8 convolution or this implementation does not take raises, naming
    the argument (at creation: dst is never written)."""
    src, dst = MD([1, 4, 5, 5], dt.u8, "acdb"), MD([1, 4, 5, 5], dt.s32, "acdb")
    wei = MD([4, 4, 3, 3], dt.u8 if case == "weights-u8" else dt.s8, "any")
    attr = dnnl.primitive_attr()
    if case == "wei-mask-2":
        attr.set_scales_mask(WEI, 2)
    if case == "wei-zp":
        attr.set_zero_points_mask(WEI, 0)
    if case == "src-zp-per-mb":  # oneDNN's convolution takes masks 0 and 2 only
        attr.set_zero_points_mask(SRC, 1)
    if case == "dst-zp-mask-3":
        attr.set_zero_points_mask(DST, 3)
    want = {"weights-u8": "weights_desc", "wei-mask-2": "ARG_WEIGHTS", "wei-zp":
            "ARG_WEIGHTS", "src-zp-per-mb": "mask 1 for ARG_SRC",
            "dst-zp-mask-3": "mask 3 for ARG_DST", "winograd": "winograd",
            "deconvolution": "deconvolution", "backward-data": "diff_dst_desc"}[case]
    with pytest.raises((unimplemented, invalid_arguments), match=want):
        if case == "deconvolution":
            dnnl.deconvolution_forward.primitive_desc(  # int8 deconvolution: not Winograd
                engine, PK.forward_inference, A.deconvolution_winograd, src, wei, dst, [1, 1],
                [1, 1], [1, 1])
        elif case == "backward-data":
            dnnl.convolution_backward_data.primitive_desc(
                engine, A.convolution_direct, MD([1, 4, 5, 5], dt.f32, "acdb"), wei,
                MD([1, 4, 5, 5], dt.u8, "acdb"), [1, 1], [1, 1], [1, 1], None)
        else:
            alg = A.convolution_winograd if case == "winograd" else A.convolution_direct
            dnnl.convolution_forward.primitive_desc(
                engine, PK.forward_training, alg, src, wei, dst, [1, 1], [1, 1], [1, 1],
                attr=attr)


_OCLGRIND_PROBE = r"""
import json, sys
import numpy as np
import pydnnl as dnnl
sys.path.insert(0, TESTS)
from test_conv_int8 import _problem, _run, ints, quant_attr
from pydnnl.reference.conv_int8 import conv_int8_acc

dt = dnnl.memory.data_type
eng = dnnl.engine.from_name("Oclgrind")
rng = np.random.default_rng(3)
attr = quant_attr(zps={dnnl.ARG_SRC: 0})
pd, wdims, dsp = _problem(eng, dt.u8, dt.s32, mb=1, g=2, ic=4, oc=4, sp=(4, 3), k=(3, 2),
                          s=(2, 1), p=(1, 1), act="nchw", attr=attr)
x, w = ints(rng, (1, 4, 4, 3), dt.u8), ints(rng, wdims, dt.s8)
got = _run(eng, pd, {dnnl.ARG_SRC: x, dnnl.ARG_WEIGHTS: w}, zps={dnnl.ARG_SRC: 9})
want = conv_int8_acc(x, w, (2, 1), (1, 1), dsp, zp_src=9)
# per-channel src and dst zero points: the padding filled per channel, the weighted sums
attr = quant_attr(zps={dnnl.ARG_SRC: 2, dnnl.ARG_DST: 2})
pd, wdims, dsp = _problem(eng, dt.s8, dt.s32, mb=1, g=2, ic=4, oc=4, sp=(4, 3), k=(3, 2),
                          s=(2, 1), p=(1, 1), act="nhwc", attr=attr)
x, w = ints(rng, (1, 4, 4, 3), dt.s8), ints(rng, wdims, dt.s8)
zs, zd = np.array([5, -3, 100, -128], np.int32), np.array([1, -2, 3, 7], np.int32)
got_c = _run(eng, pd, {dnnl.ARG_SRC: x, dnnl.ARG_WEIGHTS: w},
             zps={dnnl.ARG_SRC: zs, dnnl.ARG_DST: zd})
want_c = conv_int8_acc(x, w, (2, 1), (1, 1), dsp, groups=2, zp_src=zs) + zd.reshape(1, -1, 1, 1)
print(json.dumps({"exact": bool(np.array_equal(got, want)),
                  "per_channel": bool(np.array_equal(got_c, want_c))}))
"""


def test_conv_int8_oclgrind():
    """The byte im2col (padding filled with the src zero point, common or per channel), the
    grouped integer GEMM (column sums weighted per k for per-channel src zero points) and
    the staged nchw store under Oclgrind: no invalid access, race or uninitialized read."""
    import pathlib
    import sys

    here = pathlib.Path(__file__).parent
    sys.path.insert(0, str(here.parent.parent / "kernels"))
    from oclgrind_helpers import has_oclgrind, run_probe

    if not has_oclgrind():
        pytest.skip("no Oclgrind platform")
    # unoptimized builds: Oclgrind's uninitialized-value plugin aborts on the ``freeze``
    # instructions LLVM's optimizer emits for the integer GEMM's packing kernel
    out = run_probe(f"TESTS = {str(here)!r}\n" + _OCLGRIND_PROBE,
                    OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert out["exact"] and out["per_channel"]
