"""int8 deconvolution forward (u8/s8 src, s8 weights, s32 accumulation) against oneDNN v3's
quantized formula in numpy: the accumulator exact in int64 by scattering each src position's
products into the output points its taps reach
(:func:`pydnnl.reference.conv_int8.deconv_int8_acc`), the rest in float64, then rounded half to
even and saturated into dst's type (:func:`pydnnl.reference.matmul.quantize`). The primitive
gathers instead (a transposed byte im2col whose unreached bytes hold the src zero point, then
the integer GEMM), so the two compute the sum in different ways.

Tolerances as in ``test_conv_int8.py``: an s32 dst without a float stage is the exact integer
(equality); an integer dst after f32 float stages may land one unit away only next to a .5
tie; an f32 dst within 16 f32 ulps of the largest magnitude in the chain.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.error import invalid_arguments, unimplemented
from pydnnl.reference import conv as R
from pydnnl.reference.conv_int8 import deconv_int8, deconv_int8_acc
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
    """A deconvolution's output size."""
    return (i - 1) * s + (k - 1) * (d + 1) + 1 - pl - pr


def _problem(engine, src_t, dst_t, mb=2, g=1, ic=4, oc=6, sp=(4, 3), k=(3, 3), s=(2, 1),
             pl=(1, 1), pr=None, act="nchw", bias_t=None, attr=None, dil=None):
    """A deconvolution_forward descriptor; returns ``(pd, weights dims, dst spatial)``."""
    nsp = len(sp)
    pr = pl if pr is None else pr
    d = dil or (0,) * nsp
    dsp = tuple(_out(*v) for v in zip(sp, k, s, pl, pr, d))
    wdims = ([g, oc // g, ic // g] if g > 1 else [oc, ic]) + list(k)
    tag = _ACT[nsp][act]
    args = [engine, PK.forward_inference, A.deconvolution_direct, MD([mb, ic, *sp], src_t, tag),
            MD(wdims, dt.s8, "any")]
    if bias_t is not None:
        args.append(MD([oc], bias_t, "a"))
    args += [MD([mb, oc, *dsp], dst_t, tag), list(s)]
    if dil is not None:
        args.append(list(dil))
    args += [list(pl), list(pr)]
    pd = dnnl.deconvolution_forward.primitive_desc(*args, attr=attr)
    return pd, wdims, dsp


def _run(engine, pd, tensors, scales=None, zps=None, ops=None, prior=None):
    """Execute with numpy ``tensors`` (logical dims) by argument; dst as float64."""
    return run_int8(dnnl.deconvolution_forward, engine, pd, tensors, scales, zps, ops, prior)


_check = check_quantized


def test_deconv_int8_reference_matches_float_reference():
    """The int64 scatter reference equals the float64 deconvolution reference (the
    convolution backward data form) on small integers: strides, padding, dilation, groups."""
    rng = np.random.default_rng(0)
    for sp, k, s, pl, pr, d, g in [((5,), (3,), (2,), (1,), (0,), (0,), 1),
                                   ((4, 5), (3, 2), (2, 3), (1, 0), (2, 1), (1, 0), 2),
                                   ((3, 4, 2), (2, 3, 2), (1, 2, 2), (0, 1, 1), (1, 0, 0),
                                    (0, 1, 0), 3)]:
        ic, oc = 3 * g, 2 * g
        x = rng.integers(-5, 5, (2, ic) + sp)
        w = rng.integers(-5, 5, ((g, oc // g, ic // g) if g > 1 else (oc, ic)) + k)
        ref = R.deconv_forward(x.astype(np.float64), w.astype(np.float64), None, list(s),
                               list(d), list(pl), list(pr), groups=g, dtype=np.float64)
        assert np.array_equal(deconv_int8_acc(x, w, s, pl, ref.shape[2:], d, g), ref)


def test_deconv_int8_s32_exact(engine):
    """u8 src, s32 dst, no float stage: the exact integer, strided (output points between
    strides reached by some taps only) and padded, nchw; impl_info_str names the solver."""
    rng = np.random.default_rng(1)
    pd, wdims, dsp = _problem(engine, dt.u8, dt.s32)
    assert pd.impl_info_str() == "loopy:deconv_im2col_gemm_int8"
    assert pd.get_solver() == "deconv_im2col_gemm_int8"
    x, w = ints(rng, (2, 4, 4, 3), dt.u8), ints(rng, wdims, dt.s8)
    got = _run(engine, pd, {SRC: x, WEI: w})
    assert np.array_equal(got, deconv_int8_acc(x, w, (2, 1), (1, 1), dsp).astype(np.float64))


# (src type, groups, ic, oc, src spatial, kernel, strides, padding_l, padding_r, dilation,
#  activation layout, src zero point mask, dst zero point mask)
ZERO_POINTS = [
    (dt.u8, 1, 5, 6, (4, 3), (3, 3), (2, 1), (1, 1), (1, 1), None, "nchw", 2, 2),
    (dt.s8, 1, 4, 3, (3, 4), (3, 2), (1, 2), (2, 0), (0, 1), None, "nhwc", 0, 0),
    (dt.u8, 2, 6, 4, (3, 3), (3, 3), (2, 2), (1, 1), (0, 1), None, "nhwc", 2, 2),  # grouped
    (dt.s8, 3, 3, 3, (4, 3), (3, 3), (1, 1), (1, 1), (1, 1), None, "nchw", 2, 0),  # depthwise
    (dt.u8, 1, 7, 5, (4, 3), (1, 1), (1, 1), (0, 0), (0, 0), None, "nhwc", 2, 2),  # 1x1 direct
    (dt.s8, 1, 3, 4, (6,), (3,), (3,), (2,), (1,), (1,), "nchw", 2, 2),  # 1-D dilated
    (dt.u8, 2, 4, 6, (3, 2, 3), (2, 3, 2), (2, 1, 2), (1, 1, 0), (0, 1, 1), (0, 1, 0),
     "nhwc", 0, 2),  # 3-D
]


@pytest.mark.parametrize("src_t,g,ic,oc,sp,k,s,pl,pr,dil,act,zs_mask,zd_mask", ZERO_POINTS,
                         ids=[f"{c[0].name}-g{c[1]}-{len(c[4])}d-k{c[5][0]}s{c[6][0]}-{c[10]}"
                              f"-zp{c[11]}{c[12]}" for c in ZERO_POINTS])
def test_deconv_int8_zero_points_exact(engine, src_t, g, ic, oc, sp, k, s, pl, pr, dil, act,
                                       zs_mask, zd_mask):
    """Src zero points common or per input channel (a byte no src position reaches holds its
    channel's, so it contributes nothing), dst zero points common or per output channel, an
    s32 bias, s32 dst: the exact integer against the int64 scatter, 1-D to 3-D, strided,
    padded (asymmetric), dilated, grouped and depthwise; the 1x1 stride-1 nhwc problem reads
    src itself."""
    rng = np.random.default_rng(ic * 10 + oc + g + len(sp))
    attr = quant_attr(zps={SRC: zs_mask, DST: zd_mask})
    pd, wdims, dsp = _problem(engine, src_t, dt.s32, g=g, ic=ic, oc=oc, sp=sp, k=k, s=s,
                              pl=pl, pr=pr, dil=dil, act=act, bias_t=dt.s32, attr=attr)
    if all(v == 1 for v in k) and act == "nhwc":
        assert "im2col" not in dnnl.deconvolution_forward(pd)._plan.describe()
    x, w = ints(rng, (2, ic) + sp, src_t), ints(rng, wdims, dt.s8)
    lo, hi = (0, 256) if src_t == dt.u8 else (-128, 128)  # representable: holes cancel
    zs = rng.integers(lo, hi, ic if zs_mask else 1).astype(np.int32)
    zd = rng.integers(-300, 300, oc if zd_mask else 1).astype(np.int32)
    bias = rng.integers(-1000, 1000, oc).astype(np.int32)
    got = _run(engine, pd, {SRC: x, WEI: w, BIAS: bias}, zps={SRC: zs, DST: zd})
    per_c = (1, -1) + (1,) * len(sp)
    want = deconv_int8_acc(x, w, s, pl, dsp, dil, g, zs if zs_mask else zs[0])
    want = want + bias.reshape(per_c) + (zd.reshape(per_c) if zd_mask else zd[0])
    assert np.array_equal(got, want.astype(np.float64))


@pytest.mark.parametrize("src_t,dst_t,act", [(dt.u8, dt.f32, "nchw"), (dt.s8, dt.s8, "nhwc"),
                                             (dt.u8, dt.u8, "nhwc"), (dt.s8, dt.s32, "nchw")],
                         ids=lambda v: getattr(v, "name", v))
def test_deconv_int8_dst_types_scaled(engine, src_t, dst_t, act):
    """Scales src common, weights per output channel, dst common; common src and dst zero
    points; an f32 bias; strided 2-D."""
    rng = np.random.default_rng(int(src_t) * 7 + int(dst_t))
    attr = quant_attr({SRC: 0, WEI: 1, DST: 0}, {SRC: 0, DST: 0})
    pd, wdims, dsp = _problem(engine, src_t, dst_t, act=act, bias_t=dt.f32, attr=attr)
    x, w = ints(rng, (2, 4, 4, 3), src_t), ints(rng, wdims, dt.s8)
    bias = (rng.standard_normal(6) * 8).astype(np.float32)
    zps = {SRC: 128 if src_t == dt.u8 else 3, DST: -4 if dst_t == dt.s8 else 5}
    sc = {SRC: np.float32(0.05), WEI: rng.uniform(0.01, 0.03, 6).astype(np.float32),
          DST: np.float32(0.5) if dst_t != dt.f32 else np.float32(2.0)}
    got = _run(engine, pd, {SRC: x, WEI: w, BIAS: bias}, sc, zps)
    y = deconv_int8(x, w, (2, 1), (1, 1), dsp, bias=bias, src_scale=sc[SRC],
                    wei_scale=sc[WEI], dst_scale=sc[DST], zp_src=zps[SRC], zp_dst=zps[DST])
    _check(got, y, dst_t, np.abs(y).max() * float(sc[DST]) + np.abs(bias).max())


@pytest.mark.parametrize("g,ic,oc,act", [(2, 4, 6, "nhwc"), (6, 6, 6, "nchw")],
                         ids=["grouped-nhwc", "depthwise-nchw"])
def test_deconv_int8_groups_per_oc_scales(engine, g, ic, oc, act):
    """Grouped and depthwise weights with per-output-channel scales (mask 3 over [G, OCg]),
    a per-input-channel src zero point, u8 src, s8 dst."""
    rng = np.random.default_rng(g)
    attr = quant_attr({WEI: 3, DST: 0}, {SRC: 2})
    pd, wdims, dsp = _problem(engine, dt.u8, dt.s8, g=g, ic=ic, oc=oc, act=act, attr=attr)
    x, w = ints(rng, (2, ic, 4, 3), dt.u8), ints(rng, wdims, dt.s8)
    zs = rng.integers(0, 256, ic).astype(np.int32)
    sc = {WEI: rng.uniform(0.002, 0.01, oc).astype(np.float32), DST: np.float32(0.25)}
    got = _run(engine, pd, {SRC: x, WEI: w}, sc, {SRC: zs})
    y = deconv_int8(x, w, (2, 1), (1, 1), dsp, groups=g, wei_scale=sc[WEI],
                    dst_scale=sc[DST], zp_src=zs)
    _check(got, y, dt.s8, np.abs(y).max() * float(sc[DST]))


def test_deconv_int8_post_op_chain(engine):
    """relu, then sum (scale 0.5) over the prior u8 dst, then a per-channel binary add, with
    scales and a src zero point, 1-D stride 2 nchw, s8 src -> u8 dst."""
    rng = np.random.default_rng(6)
    po = dnnl.post_ops()
    po.append_eltwise(A.eltwise_relu, 0.0, 0.0)
    po.append_sum(0.5)
    po.append_binary(A.binary_add, MD([1, 6, 1], dt.f32, "abc"))
    attr = quant_attr({SRC: 0, WEI: 0, DST: 0}, {SRC: 0}, po=po)
    pd, wdims, dsp = _problem(engine, dt.s8, dt.u8, sp=(6,), k=(3,), s=(2,), pl=(1,),
                              pr=(0,), attr=attr)
    assert "attr-post-ops" in pd._info
    x, w = ints(rng, (2, 4, 6), dt.s8), ints(rng, wdims, dt.s8)
    prior = ints(rng, (2, 6) + dsp, dt.u8)
    add = (rng.standard_normal((1, 6, 1)) * 4).astype(np.float32)
    sc = {SRC: np.float32(0.03), WEI: np.float32(0.02), DST: np.float32(0.25)}
    got = _run(engine, pd, {SRC: x, WEI: w}, sc, {SRC: -9}, ops={2: add}, prior=prior)

    def chain(v):
        v = eltwise_forward(A.eltwise_relu, v, 0.0, 0.0)
        return v + 0.5 * prior.astype(np.float64) + add.astype(np.float64)
    y = deconv_int8(x, w, (2,), (1,), dsp, src_scale=sc[SRC], wei_scale=sc[WEI],
                    dst_scale=sc[DST], zp_src=-9, post_ops=chain)
    _check(got, y, dt.u8, np.abs(y).max() * float(sc[DST]) + 255)


def test_deconv_int8_host_scalars(engine):
    """Host-scalar src scale and src/dst zero points (oneDNN v3.8's host_scalar memories), as
    the deconv CI list's ``src:host_scalar`` problems pass them; s32 dst."""
    rng = np.random.default_rng(8)
    attr = dnnl.primitive_attr()
    attr.set_host_scale(SRC, dt.f32)
    attr.set_host_zero_point(SRC, dt.s32)
    attr.set_host_zero_point(DST, dt.s32)
    pd, wdims, dsp = _problem(engine, dt.u8, dt.f32, act="nhwc", attr=attr)
    x, w = ints(rng, (2, 4, 4, 3), dt.u8), ints(rng, wdims, dt.s8)
    s = dnnl.stream(engine)
    hs = dnnl.memory.desc.host_scalar
    args = {SRC: dnnl.memory(pd.src_desc(), engine, x),
            WEI: dnnl.memory(pd.weights_desc(), engine, w),
            DST: dnnl.memory(pd.dst_desc(), engine),
            S | SRC: dnnl.memory(hs(dt.f32), np.float32(0.25)),
            Z | SRC: dnnl.memory(hs(dt.s32), 31), Z | DST: dnnl.memory(hs(dt.s32), 15)}
    dnnl.deconvolution_forward(pd).execute(s, args)
    s.wait()
    y = deconv_int8(x, w, (2, 1), (1, 1), dsp, src_scale=0.25, zp_src=31, zp_dst=15)
    _check(args[DST].to_numpy().astype(np.float64), y, dt.f32, np.abs(y).max())


@pytest.mark.parametrize("case", ["weights-u8", "dst-f64", "wei-mask-2", "wei-zp",
                                  "src-zp-mask-1", "dst-zp-mask-3", "src-scale-mask-2",
                                  "winograd", "solver", "backward-data"])
def test_deconv_int8_refusals(engine, case):
    """What oneDNN's int8 deconvolution or this implementation does not take raises at
    creation (dst is never written), naming the argument."""
    src, dst = MD([1, 4, 5, 5], dt.u8, "acdb"), MD([1, 4, 5, 5], dt.s32, "acdb")
    if case == "dst-f64":
        dst = MD([1, 4, 5, 5], dt.f64, "acdb")
    wei = MD([4, 4, 3, 3], dt.u8 if case == "weights-u8" else dt.s8, "any")
    attr = dnnl.primitive_attr()
    if case == "wei-mask-2":
        attr.set_scales_mask(WEI, 2)
    if case == "src-scale-mask-2":
        attr.set_scales_mask(SRC, 2)
    if case == "wei-zp":
        attr.set_zero_points_mask(WEI, 0)
    if case == "src-zp-mask-1":  # oneDNN's deconvolution takes masks 0 and 2 only
        attr.set_zero_points_mask(SRC, 1)
    if case == "dst-zp-mask-3":
        attr.set_zero_points_mask(DST, 3)
    want = {"weights-u8": "weights_desc", "dst-f64": "dst_desc", "wei-mask-2":
            "mask 2 for ARG_WEIGHTS", "wei-zp": "ARG_WEIGHTS", "src-zp-mask-1":
            "mask 1 for ARG_SRC", "dst-zp-mask-3": "mask 3 for ARG_DST", "src-scale-mask-2":
            "mask 2 for ARG_SRC", "winograd": "deconvolution_winograd",
            "solver": "deconv_im2col_gemm_int8", "backward-data": "diff_dst_desc"}[case]
    with pytest.raises((unimplemented, invalid_arguments), match=want):
        if case == "backward-data":  # oneDNN has no int8 backward propagation
            dnnl.deconvolution_backward_data.primitive_desc(
                engine, A.deconvolution_direct, MD([1, 4, 5, 5], dt.f32, "acdb"), wei,
                MD([1, 4, 5, 5], dt.u8, "acdb"), [1, 1], [1, 1], [1, 1], None)
        else:
            alg = A.deconvolution_winograd if case == "winograd" else A.deconvolution_direct
            kw = {"solver": "im2col_gemm"} if case == "solver" else {}
            dnnl.deconvolution_forward.primitive_desc(
                engine, PK.forward_training, alg, src, wei, dst, [1, 1], [1, 1], [1, 1],
                attr=attr, **kw)


_OCLGRIND_PROBE = r"""
import json, sys
import numpy as np
import pydnnl as dnnl
sys.path.insert(0, TESTS)
from test_deconv_int8 import _problem, _run, ints, quant_attr
from pydnnl.reference.conv_int8 import deconv_int8_acc

dt = dnnl.memory.data_type
eng = dnnl.engine.from_name("Oclgrind")
rng = np.random.default_rng(3)
# common src zero point, grouped, stride 2 (bytes between strides), staged nchw store
attr = quant_attr(zps={dnnl.ARG_SRC: 0})
pd, wdims, dsp = _problem(eng, dt.u8, dt.s32, mb=1, g=2, ic=4, oc=4, sp=(3, 2), k=(3, 2),
                          s=(2, 1), pl=(1, 0), pr=(0, 1), act="nchw", attr=attr)
x, w = ints(rng, (1, 4, 3, 2), dt.u8), ints(rng, wdims, dt.s8)
got = _run(eng, pd, {dnnl.ARG_SRC: x, dnnl.ARG_WEIGHTS: w}, zps={dnnl.ARG_SRC: 9})
want = deconv_int8_acc(x, w, (2, 1), (1, 0), dsp, groups=2, zp_src=9)
# per-channel src and dst zero points, dilated, channels-last
attr = quant_attr(zps={dnnl.ARG_SRC: 2, dnnl.ARG_DST: 2})
pd, wdims, dsp = _problem(eng, dt.s8, dt.s32, mb=1, g=1, ic=3, oc=4, sp=(2, 3), k=(2, 2),
                          s=(2, 2), pl=(1, 0), pr=(0, 0), dil=(1, 0), act="nhwc", attr=attr)
x, w = ints(rng, (1, 3, 2, 3), dt.s8), ints(rng, wdims, dt.s8)
zs, zd = np.array([5, -3, 100], np.int32), np.array([1, -2, 3, 7], np.int32)
got_c = _run(eng, pd, {dnnl.ARG_SRC: x, dnnl.ARG_WEIGHTS: w},
             zps={dnnl.ARG_SRC: zs, dnnl.ARG_DST: zd})
want_c = deconv_int8_acc(x, w, (2, 2), (1, 0), dsp, (1, 0), zp_src=zs) + zd.reshape(1, -1, 1, 1)
print(json.dumps({"exact": bool(np.array_equal(got, want)),
                  "per_channel": bool(np.array_equal(got_c, want_c))}))
"""


def test_deconv_int8_oclgrind():
    """The transposed byte im2col (strided gathers, unreached bytes filled with the src zero
    point, common or per channel), the grouped integer GEMM and the staged nchw store under
    Oclgrind: no invalid access, race or uninitialized read."""
    here = pathlib.Path(__file__).parent
    sys.path.insert(0, str(here.parent.parent / "kernels"))
    from oclgrind_helpers import has_oclgrind, run_probe

    if not has_oclgrind():
        pytest.skip("no Oclgrind platform")
    # unoptimized builds, as the int8 convolution's probe (the GEMM's packing kernel)
    out = run_probe(f"TESTS = {str(here)!r}\n" + _OCLGRIND_PROBE,
                    OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert out["exact"] and out["per_channel"]
