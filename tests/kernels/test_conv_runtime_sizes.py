"""Convolution kernels with sizes as arguments (``conv_im2col``, ``conv_epilogue``,
``conv_bias_grad``, ``conv_col2im``, ``conv_direct``): creating a primitive for a new spatial
size or minibatch reuses the programs of the first creation, the results stay right, and the kernels
stay inside their buffers under Oclgrind (partial last work-groups included)."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.benchdnn.conv import ConvBench, ConvOptions
from pydnnl.benchdnn.conv_problem import ConvProblem
from pydnnl.kernels.conv_im2col import (
    BiasGradProblem,
    Col2ImProblem,
    EpilogueProblem,
    Im2ColProblem,
    bias_grad_runtime,
    col2im_runtime,
    epilogue_runtime,
    im2col_runtime,
)
from pydnnl.runtime import kernel_cache

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import CONV_PROBE_PRELUDE, has_oclgrind, run_probe  # noqa: E402

FAMILIES = ("conv_im2col", "conv_epilogue", "conv_bias_grad", "channel_slices", "conv_col2im",
            "conv_direct")


@pytest.fixture()
def requested(spy_kernels):
    """(family, key) of every kernel of our families asked of the kernel cache."""
    return spy_kernels(FAMILIES)


@pytest.fixture(scope="module")
def eng(first_engine):
    """The device these run on: the first present (nothing here is CPU-specific, and a
    GPU-only machine has no CPU engine)."""
    return first_engine

# (first problem, then others of the same class: other spatial sizes and minibatches)
CLASSES = [
    # 3x3 padded: im2col with bounds tests on both sides; fwd epilogue with bias (16
    # channels: fewer keep baked sizes, see im2col_runtime)
    ["mb2ic16ih9oc12oh9kh3ph1", "mb3ic16ih7oc12oh7kh3ph1", "mb1ic16ih6iw11oc12oh6ow11kh3kw3ph1pw1"],
    # 1x1: backward weights' transposing copy of channel blocks (kmajor, ic_block)
    ["mb2ic32ih5oc8oh5kh1ph0", "mb1ic32ih6oc8oh6kh1ph0", "mb3ic32ih4oc8oh4kh1ph0"],
]


@pytest.mark.parametrize("tags", [{}, {"stag": "abx", "dtag": "abx"}], ids=["any", "abx"])
@pytest.mark.parametrize("descs", CLASSES, ids=["3x3", "1x1"])
def test_new_spatial_size_and_minibatch_need_no_new_kernel(eng, requested, descs, tags):
    # channels-first epilogues keep baked sizes (a specialization: see epilogue_runtime)
    baked = {"conv_epilogue"} if tags else set()
    for i, desc in enumerate(descs):
        for d in ("FWD_B", "BWD_D", "BWD_WB"):
            o = ConvOptions(dir=d, alg="im2col_gemm", **tags)
            b = ConvBench(eng, ConvProblem.parse(desc), o)
            assert b.check() <= b.tolerance(), (desc, d)
        requested[:] = [r for r in requested if r[0] not in baked]
        if i == 0:
            first = set(requested)
            # every key holds size variables, but the slice sums', which hold no size at all
            assert first and all("Variable('" in key or fam == "channel_slices"
                                 for fam, key in first), first
            requested.clear()
    assert set(requested) <= first, sorted(set(requested) - first)


def test_direct_solver_padding_copy_is_shared(eng):
    """The direct solver's zero-padding copy (and bias gradient) serve every size."""
    seen = []
    orig = kernel_cache.get_kernel

    def spy(engine, family, key, build):
        seen.append((family, repr(key)))
        return orig(engine, family, key, build)

    import pydnnl.runtime.plan as plan_mod

    plan_mod.get_kernel, keep = spy, plan_mod.get_kernel
    try:
        keys = []
        for desc in ("mb2ic4ih7oc4oh7kh3ph1", "mb1ic4ih9oc4oh9kh3ph1"):
            seen.clear()
            for d in ("FWD_B", "BWD_WB"):
                b = ConvBench(eng, ConvProblem.parse(desc), ConvOptions(dir=d, alg="direct"))
                assert b.check() <= b.tolerance(), (desc, d)
            # (the direct kernel itself keeps baked sizes in forward by default)
            keys.append({k for k in seen if k[0] in FAMILIES and k[0] != "conv_direct"})
    finally:
        plan_mod.get_kernel = keep
    assert keys[0] and keys[0] == keys[1]


def test_runtime_forms_and_what_keeps_baked_sizes():
    nhwc = (0, ((1, 1600, ()), (1, 1, ()), (1, 320, ()), (1, 16, ())))  # [2, 16, 5, 20]
    ip = Im2ColProblem(nb=2, groups=1, icg=16, src_sp=(5, 20), dst_sp=(7, 22), kernel=(1, 1),
                       strides=(1, 1), dilates=(0, 0), padding_l=(1, 1), src=nhwc, src_n=3200,
                       col_n=-1, order=(0, 1, 3, 4, 5, 6, 2))
    q, sizes = im2col_runtime(ip)
    assert q.guards == ((True, True), (True, True))
    assert sizes["nb"] == 2 and sizes["is1"] == 20 and sizes["os0"] == 7
    assert sizes["src_d0"] == 1600 and sizes["src_d2"] == 320
    assert "src_d1" not in sizes and "src_d3" not in sizes  # unit and channel-count strides
    assert q.src[1][3] == (1, 16, ())
    assert sizes["nb_x_os0_x_os1"] == 2 * 7 * 22
    blocked = (0, ((1, 1600, ()), (8, 8, ((8, 1, 1),)), (1, 320, ()), (1, 16, ())))
    assert im2col_runtime(Im2ColProblem(**{**ip.__dict__, "src": blocked}))[1] == {}
    # too few channels for the lanes: a baked specialization
    assert im2col_runtime(Im2ColProblem(**{**ip.__dict__, "icg": 3}))[1] == {}
    ep = EpilogueProblem(nb=2, channels=16, sp=(5, 20), dst=nhwc, dst_n=3200, acc=None, acc_n=0,
                         bias=None, bias_n=0, post_ops=())
    q, sizes = epilogue_runtime(ep)
    assert q.order == (0, 2, 1) and sizes["pts"] == 100 and sizes["dst_d2"] == 16
    # binary post-ops' operands bake their layouts; a view whose rows do not fold stays too
    assert epilogue_runtime(EpilogueProblem(**{**ep.__dict__, "post_ops": (
        ("binary", 0, ((1, 3, ()),), 3),)}))[1] == {}
    gappy = (0, ((1, 2000, ()), (1, 1, ()), (1, 400, ()), (1, 16, ())))
    assert epilogue_runtime(EpilogueProblem(**{**ep.__dict__, "dst": gappy}))[1] == {}
    # points innermost (channels-first): a baked specialization
    nchw = (0, ((1, 1600, ()), (1, 100, ()), (1, 20, ()), (1, 1, ())))
    assert epilogue_runtime(EpilogueProblem(**{**ep.__dict__, "dst": nchw}))[1] == {}
    bp = BiasGradProblem(mb=2, channels=16, sp=(5, 20), t=nhwc, t_n=3200,
                         bias=(0, ((1, 1, ()),)), bias_n=16)
    assert bias_grad_runtime(bp)[1]["pts"] == 100


PROBE = "SEED = 3\n" + CONV_PROBE_PRELUDE + r"""
def run(kind, desc_tag, x_shape, w_shape, S, PL, PR, solver, ops=False):
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    D = [0] * (len(x_shape) - 2)
    geo = R.validate_conv(x.shape, w.shape, S, D, PL, PR)
    yd = geo.dst_dims()
    attr = None
    if ops:
        po = dnnl.post_ops(); po.append_eltwise(dnnl.algorithm.eltwise_relu, 0.2, 0)
        attr = dnnl.primitive_attr(); attr.set_post_ops(po)
    xm, wm, bm, ym = (MD(x.shape, F32, desc_tag), MD(w.shape, F32, "any"),
                      MD([w_shape[0]], F32, "x"), MD(yd, F32, desc_tag))
    if kind == "fwd":
        pd = convolution_forward.primitive_desc(eng, dnnl.prop_kind.forward_training,
            dnnl.algorithm.convolution_auto, xm, wm, bm, ym, S, D, PL, PR, attr, solver=solver)
        Y = mem(pd.dst_desc())
        convolution_forward(pd).execute(s, {dnnl.ARG_SRC: mem(pd.src_desc(), x),
            dnnl.ARG_WEIGHTS: mem(pd.weights_desc(), w), dnnl.ARG_BIAS: mem(pd.bias_desc(), b),
            dnnl.ARG_DST: Y})
        s.wait()
        ref = R.conv_forward(x, w, b, S, D, PL, PR)
        if ops:
            ref = R.apply_post_ops(ref, po, None)
        return close(Y.to_numpy(), ref)
    dy = rng.standard_normal(yd).astype(np.float32)
    pd = convolution_backward_weights.primitive_desc(eng, dnnl.algorithm.convolution_auto,
        xm, wm, bm, ym, S, D, PL, PR, None, solver=solver)
    DW, DB = mem(pd.diff_weights_desc()), mem(pd.diff_bias_desc())
    convolution_backward_weights(pd).execute(s, {dnnl.ARG_SRC: mem(pd.src_desc(), x),
        dnnl.ARG_DIFF_DST: mem(pd.diff_dst_desc(), dy), dnnl.ARG_DIFF_WEIGHTS: DW,
        dnnl.ARG_DIFF_BIAS: DB})
    s.wait()
    rw, rb = R.conv_backward_weights(x, dy, w.shape, S, D, PL, PR)
    return close(DW.to_numpy().reshape(rw.shape), rw) and close(DB.to_numpy(), rb)

# channels-last, 3 input channels (lanes over taps and channels), 70 output channels (a
# partial epilogue work-group), post-ops; padded stride 2 (bounds tests on both sides)
results["fwd_nhwc"] = run("fwd", "nhwc", (2, 3, 5, 4), (70, 3, 3, 3), [2, 1], [1, 1], [1, 1],
                          "im2col_gemm", ops=True)
# channels-first: lanes over the output points (25, a partial work-group)
results["fwd_nchw"] = run("fwd", "nchw", (1, 2, 5, 5), (3, 2, 3, 3), [1, 1], [1, 1], [1, 1],
                          "im2col_gemm")
# backward weights: channel-block copy (1x1, kmajor) and the bias gradient (channels-last:
# sums over slices of 70 rows, then over the slices; channels-first: 20 points a channel)
results["bwd_w_nhwc"] = run("bwd_w", "nhwc", (2, 16, 5, 7), (3, 16, 1, 1), [1, 1], [0, 0],
                            [0, 0], "im2col_gemm")
results["bwd_w_nchw"] = run("bwd_w", "nchw", (1, 2, 4, 5), (3, 2, 3, 3), [1, 1], [1, 1],
                            [1, 1], "im2col_gemm")
# the direct solver's zero-padding copy
results["direct_fwd"] = run("fwd", "nchw", (1, 2, 4, 5), (3, 2, 3, 3), [1, 1], [1, 1], [1, 1],
                            "direct")
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind simulator is not installed")
def test_runtime_size_kernels_clean_under_oclgrind():
    results = run_probe(PROBE, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results == {k: True for k in results} and len(results) == 5, results


@pytest.mark.parametrize("H,W", [(7, 11), (3, 5), (8, 16)])
def test_bias_grad_partial_block_matches_numpy(eng, H, W):
    """The run-time bias reduction with a strided (non-dense batch) layout over a point
    count with whole blocks and a tail (77), under one block (15) and of whole blocks only
    (128, with 64-point blocks)."""
    from pydnnl.kernels.conv_im2col import build_bias_grad
    from pydnnl.runtime.plan import Plan, Ref

    mb, C = 3, 5
    t = np.random.default_rng(0).standard_normal((mb + 1) * C * H * W).astype(np.float32)
    lay = (0, ((1, (C + 0) * H * W + 13, ()), (1, H * W, ()), (1, W, ()), (1, 1, ())))
    bp = BiasGradProblem(mb=mb, channels=C, sp=(H, W), t=lay, t_n=t.size,
                         bias=(0, ((1, 1, ()),)), bias_n=C)
    q, sizes = bias_grad_runtime(bp)
    assert sizes["t_d0"] == C * H * W + 13
    assert q.wg == 64 and sizes["pfull"] == H * W // 256 * 256
    stream = dnnl.stream(eng)
    plan = Plan(eng, "test")
    plan.kernel("conv_bias_grad", q, build_bias_grad, t=Ref("t"), bias=Ref("b"), **sizes)
    def md(n):
        return dnnl.memory.desc([n], dnnl.memory.data_type.f32, dnnl.memory.format_tag.a)
    T, B = dnnl.memory(md(t.size), eng, t), dnnl.memory(md(C), eng)
    plan.run(stream, {"t": T.buffer, "b": B.buffer})
    stream.wait()
    ref = np.zeros(C)
    for n in range(mb):
        base = n * (C * H * W + 13)
        ref += t[base:base + C * H * W].reshape(C, H * W).sum(axis=1)
    np.testing.assert_allclose(B.to_numpy(), ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("rows,C,S,wg", [(70, 24, 3, 16), (5, 3, 8, 16), (1000, 64, 7, 64)])
def test_channel_slices_match_numpy(eng, rows, C, S, wg):
    """Per-channel sums over slices of channels-last rows: slices of uneven length and empty
    ones (more slices than rows), channel counts no power of two (fewer lanes), an offset."""
    from pydnnl.kernels.channel_sums import ChannelSlices, build_channel_slices, lanes
    from pydnnl.runtime.plan import Plan, Ref

    t = np.random.default_rng(1).standard_normal(7 + rows * C).astype(np.float32)
    rps = -(-rows // S)
    stream = dnnl.stream(eng)
    plan = Plan(eng, "test")
    plan.kernel("channel_slices", ChannelSlices(channels=C, row_stride=C, wg=wg),
                build_channel_slices, t=Ref("t"), part=Ref("p"), t_off=7, part_off=C,
                nrows=rows, rps=rps, nslices=S)

    def md(n):
        return dnnl.memory.desc([n], dnnl.memory.data_type.f32, dnnl.memory.format_tag.a)

    T, Pm = dnnl.memory(md(t.size), eng, t), dnnl.memory(md((S + 1) * C), eng)
    plan.run(stream, {"t": T.buffer, "p": Pm.buffer})
    stream.wait()
    x = t[7:].reshape(rows, C).astype(np.float64)
    want = np.stack([x[s * rps:(s + 1) * rps].sum(axis=0) for s in range(S)])
    np.testing.assert_allclose(Pm.to_numpy()[C:].reshape(S, C), want, rtol=1e-5, atol=1e-4)
    assert lanes(C, wg) in ({24: 8, 3: 1, 64: 64}[C],)


# backward data through im2col + GEMM (col2im) and the direct solver: (alg, directions,
# first problem, then others of the same class: other spatial sizes and minibatches, odd and
# even under strides)
BWD_CLASSES = [
    ("im2col_gemm", ("BWD_D",), ["mb2ic16ih7oc8oh7kh3ph1", "mb1ic16ih10iw6oc8oh10ow6kh3kw3ph1pw1",
                                 "mb3ic16ih5oc8oh5kh3ph1"]),
    ("im2col_gemm", ("BWD_D",), ["mb2ic16ih8oc8oh4kh3sh2ph1", "mb1ic16ih7oc8oh4kh3sh2ph1",
                                 "mb3ic16ih9iw6oc8oh5ow3kh3kw3sh2sw2ph1pw1"]),
    # depthwise, as in MobileNet (stride 1 and 2): backward weights (forward and backward
    # data keep baked sizes by default, see test_direct_runtime_sizes_on_request)
    ("direct", ("BWD_WB",), ["g4mb2ic4ih7oc4oh7kh3ph1", "g4mb1ic4ih9oc4oh9kh3ph1",
                             "g4mb3ic4ih6iw5oc4oh6ow5kh3kw3ph1pw1"]),
    ("direct", ("BWD_WB",), ["g4mb2ic4ih8oc4oh4kh3sh2ph1", "g4mb1ic4ih7oc4oh4kh3sh2ph1",
                             "g4mb3ic4ih11iw6oc4oh6ow3kh3kw3sh2sw2ph1pw1"]),
]


@pytest.mark.parametrize("tags", [{}, {"stag": "abx", "dtag": "abx"}], ids=["any", "abx"])
@pytest.mark.parametrize("alg, dirs, descs", BWD_CLASSES,
                         ids=["col2im-3x3", "col2im-3x3s2", "direct-dw", "direct-dw-s2"])
def test_backward_data_and_direct_need_no_new_kernel(eng, requested, alg, dirs, descs,
                                                      tags):
    family = "conv_col2im" if alg == "im2col_gemm" else "conv_direct"
    for i, desc in enumerate(descs):
        for d in dirs:
            b = ConvBench(eng, ConvProblem.parse(desc), ConvOptions(dir=d, alg=alg, **tags))
            assert b.check() <= b.tolerance(), (desc, d)
        if i == 0:
            first = set(requested)
            ours = {k for f, k in first if f == family}
            assert ours and all("Variable('" in k for k in ours), first
            requested.clear()
    assert set(requested) <= first, sorted(set(requested) - first)


def _direct(eng, kind: str, xs, S, P, params: dict, tag: str = "nchw"):
    """Depthwise 3x3 through the direct solver with ``params``, against the reference."""
    from pydnnl.primitives.conv import (
        convolution_backward_data,
        convolution_backward_weights,
        convolution_forward,
    )
    from pydnnl.reference import conv as R

    MD, F32 = dnnl.memory.desc, dnnl.memory.data_type.f32
    s = dnnl.stream(eng)
    rng = np.random.default_rng(sum(xs))
    G = xs[1]
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((G, 1, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(G).astype(np.float32)
    geo = R.validate_conv(x.shape, w.shape, S, [0, 0], P, P)
    yd = geo.dst_dims()
    dy = rng.standard_normal(yd).astype(np.float32)
    xm, wm, bm, ym = MD(xs, F32, tag), MD(w.shape, F32, "any"), MD([G], F32, "x"), \
        MD(yd, F32, tag)
    extra = {"solver": "direct", "solver_params": params}

    def mem(md, a=None):
        return dnnl.memory(md, eng, a) if a is not None else dnnl.memory(md, eng)

    if kind == "fwd":
        pd = convolution_forward.primitive_desc(eng, dnnl.prop_kind.forward_training,
                                                dnnl.algorithm.convolution_auto, xm, wm, bm, ym,
                                                S, [0, 0], P, P, None, **extra)
        Y = mem(pd.dst_desc())
        convolution_forward(pd).execute(s, {
            dnnl.ARG_SRC: mem(pd.src_desc(), x), dnnl.ARG_WEIGHTS: mem(pd.weights_desc(), w),
            dnnl.ARG_BIAS: mem(pd.bias_desc(), b), dnnl.ARG_DST: Y})
        s.wait()
        return Y.to_numpy(), R.conv_forward(x, w, b, S, [0, 0], P, P)
    if kind == "bwd_d":
        pd = convolution_backward_data.primitive_desc(eng, dnnl.algorithm.convolution_auto,
                                                      xm, wm, ym, S, [0, 0], P, P, None, **extra)
        DX = mem(pd.diff_src_desc())
        convolution_backward_data(pd).execute(s, {
            dnnl.ARG_DIFF_DST: mem(pd.diff_dst_desc(), dy),
            dnnl.ARG_WEIGHTS: mem(pd.weights_desc(), w), dnnl.ARG_DIFF_SRC: DX})
        s.wait()
        return DX.to_numpy(), R.conv_backward_data(dy, w, xs, S, [0, 0], P, P)
    pd = convolution_backward_weights.primitive_desc(eng, dnnl.algorithm.convolution_auto,
                                                     xm, wm, bm, ym, S, [0, 0], P, P, None,
                                                     **extra)
    DW = mem(pd.diff_weights_desc())
    convolution_backward_weights(pd).execute(s, {
        dnnl.ARG_SRC: mem(pd.src_desc(), x), dnnl.ARG_DIFF_DST: mem(pd.diff_dst_desc(), dy),
        dnnl.ARG_DIFF_WEIGHTS: DW, dnnl.ARG_DIFF_BIAS: mem(pd.diff_bias_desc())})
    s.wait()
    rw, _ = R.conv_backward_weights(x, dy, w.shape, S, [0, 0], P, P)
    return DW.to_numpy().reshape(rw.shape), rw


@pytest.mark.parametrize("pad", [True, False], ids=["padded", "guarded"])
@pytest.mark.parametrize("S", [[1, 1], [2, 2]], ids=["s1", "s2"])
def test_direct_runtime_sizes_on_request(eng, requested, S, pad):
    """Forward and backward data of the direct kernel with ``runtime_sizes``: widths that are
    and are not multiples of the work-group (its last group moved back), two minibatches."""
    params = {"runtime_sizes": True, "pad": pad, "wg": 8}
    for i, xs in enumerate([(2, 4, 9, 17), (1, 4, 7, 19), (3, 4, 12, 20)]):
        for kind in ("fwd", "bwd_d", "bwd_w"):
            got, ref = _direct(eng, kind, xs, S, [1, 1], params)
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4 * np.abs(ref).max())
        if i == 0:
            first = set(requested)
            assert len({k for f, k in first if f == "conv_direct"}) == 3, first
            requested.clear()
    assert set(requested) <= first, sorted(set(requested) - first)


def test_col2im_and_direct_runtime_forms_and_what_stays_baked():
    from pydnnl.conv_shapes import ConvProblem as KernelProblem
    from pydnnl.kernels.conv_direct import DirectParams, direct_runtime

    nhwc = (0, ((1, 1600, ()), (1, 1, ()), (1, 320, ()), (1, 16, ())))  # [2, 16, 5, 20]
    cp = Col2ImProblem(nb=2, groups=1, icg=16, src_sp=(5, 20), dst_sp=(3, 10), kernel=(3, 3),
                       strides=(2, 2), dilates=(0, 0), padding_l=(1, 1), out=nhwc, out_n=3200,
                       col_n=-1, order=(1, 0, 5, 6, 3, 4, 2))
    q, sizes = col2im_runtime(cp)
    assert q.out_order == (0, 2, 3, 1) and q.guards == ((True, True), (True, True))
    assert sizes["nb"] == 2 and sizes["is1"] == 20 and sizes["os0"] == 3
    assert sizes["out_d0"] == 1600 and sizes["out_d2"] == 320 and "out_d3" not in sizes
    assert sizes["is0_x_nb"] == 10
    # unpadded: positions are never < 0, the upper bound is tested whatever the sizes
    assert col2im_runtime(Col2ImProblem(**{**cp.__dict__, "padding_l": (2, 2)}))[0].guards \
        == ((False, True), (False, True))
    blocked = (0, ((1, 1600, ()), (8, 8, ((8, 1, 1),)), (1, 320, ()), (1, 16, ())))
    assert col2im_runtime(Col2ImProblem(**{**cp.__dict__, "out": blocked}))[1] == {}
    assert col2im_runtime(Col2ImProblem(**{**cp.__dict__, "post_ops": (
        ("binary", 0, ((1, 3, ()),), 3),)}))[1] == {}
    # channels-last with too few channels for the lanes: baked
    few = (0, ((1, 400, ()), (1, 1, ()), (1, 80, ()), (1, 4, ())))
    assert col2im_runtime(Col2ImProblem(**{**cp.__dict__, "icg": 4, "out": few}))[1] == {}

    nchw = (0, ((1, 64, ()), (1, 16, ()), (1, 4, ()), (1, 1, ())))  # [2, 4, 4, 4]
    dp = KernelProblem(mb=2, groups=4, ic=4, oc=4, src_spatial=(4, 4), dst_spatial=(2, 2),
                       kernel=(3, 3), strides=(2, 2), dilates=(0, 0), padding_l=(1, 1),
                       padding_r=(0, 0), kind="bwd_d", src=nchw,
                       wei=(0, ((1, 9, ()), (1, 9, ()), (1, 9, ()), (1, 3, ()), (1, 1, ()))),
                       dst=(0, ((1, 16, ()), (1, 4, ()), (1, 2, ()), (1, 1, ()))),
                       src_n=128, wei_n=36, dst_n=32)
    two = DirectParams(wg=2)
    q, sizes, guards = direct_runtime(dp, padded=True, params=two)
    assert guards == ((True, True), (True, True))  # strided backward data keeps its tests
    assert sizes["mb"] == 2 and sizes["os1"] == 2 and sizes["src_d1"] == 16
    assert q.padding_r == () and q.src_n == -1
    fwd = KernelProblem(**{**dp.__dict__, "kind": "fwd", "padding_l": (0, 0)})
    assert direct_runtime(fwd, padded=True, params=two)[2] == ((False, False),) * 2
    assert direct_runtime(fwd, padded=False, params=two)[2] == ((False, True),) * 2
    assert direct_runtime(KernelProblem(**{**dp.__dict__, "src": (0, (
        (1, 64, ()), (4, 4, ((4, 1, 1),)), (1, 16, ()), (1, 4, ())))}), True, two)[1] == {}
    # narrower than a work-group, or a register tile along the width: baked
    assert direct_runtime(fwd, True, DirectParams(wg=4))[1] == {}
    assert direct_runtime(fwd, True, DirectParams(wg=2, wtile=2))[1] == {}
    # backward weights runs its lanes over channels and taps: any width
    assert direct_runtime(KernelProblem(**{**fwd.__dict__, "kind": "bwd_w"}), True,
                          DirectParams(wg=8))[1]["os1"] == 2


# col2im and the direct kernels with run-time sizes: channels-last col2im with 16 channels
# (lanes along channels) under strides with a sum post-op and odd sizes, channels-first (lanes
# along a width of 5: a partial work-group); direct depthwise forward / backward data /
# backward weights unpadded (bounds tests with clamped addresses) and padded, forward and
# backward data with run-time sizes on request
RT_BWD_PROBE = "SEED = 7\n" + CONV_PROBE_PRELUDE + r"""
def bwd_d(tag, xs, oc, S, P, solver, params=None, groups=1):
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((groups, oc // groups, xs[1] // groups, 3, 3)).astype(np.float32)
    geo = R.validate_conv(x.shape, w.shape, S, [0, 0], P, P)
    dd = rng.standard_normal(geo.dst_dims()).astype(np.float32)
    extra = {"solver": solver, **({"solver_params": params} if params else {})}
    pd = convolution_backward_data.primitive_desc(eng, dnnl.algorithm.convolution_auto,
        MD(xs, F32, tag), MD(w.shape, F32, "any"), MD(geo.dst_dims(), F32, tag),
        S, [0, 0], P, P, None, **extra)
    DX = mem(pd.diff_src_desc())
    convolution_backward_data(pd).execute(s, {dnnl.ARG_DIFF_DST: mem(pd.diff_dst_desc(), dd),
        dnnl.ARG_WEIGHTS: mem(pd.weights_desc(), w), dnnl.ARG_DIFF_SRC: DX})
    s.wait()
    return close(DX.to_numpy(), R.conv_backward_data(dd, w, xs, S, [0, 0], P, P))

def direct(kind, xs, S, P, pad):
    G = xs[1]
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((G, 1, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(G).astype(np.float32)
    geo = R.validate_conv(x.shape, w.shape, S, [0, 0], P, P)
    yd = geo.dst_dims()
    dy = rng.standard_normal(yd).astype(np.float32)
    xm, wm, bm, ym = MD(xs, F32, "nchw"), MD(w.shape, F32, "any"), MD([G], F32, "x"), \
        MD(yd, F32, "nchw")
    extra = {"solver": "direct", "solver_params": {"pad": pad, "runtime_sizes": True, "wg": 4}}
    if kind == "fwd":
        pd = convolution_forward.primitive_desc(eng, dnnl.prop_kind.forward_training,
            dnnl.algorithm.convolution_auto, xm, wm, bm, ym, S, [0, 0], P, P, None, **extra)
        Y = mem(pd.dst_desc())
        convolution_forward(pd).execute(s, {dnnl.ARG_SRC: mem(pd.src_desc(), x),
            dnnl.ARG_WEIGHTS: mem(pd.weights_desc(), w), dnnl.ARG_BIAS: mem(pd.bias_desc(), b),
            dnnl.ARG_DST: Y})
        s.wait()
        return close(Y.to_numpy(), R.conv_forward(x, w, b, S, [0, 0], P, P))
    if kind == "bwd_d":
        return bwd_d("nchw", xs, G, S, P, "direct", {"pad": pad, "runtime_sizes": True, "wg": 4},
                     groups=G)
    pd = convolution_backward_weights.primitive_desc(eng, dnnl.algorithm.convolution_auto,
        xm, wm, bm, ym, S, [0, 0], P, P, None, **extra)
    DW, DB = mem(pd.diff_weights_desc()), mem(pd.diff_bias_desc())
    convolution_backward_weights(pd).execute(s, {dnnl.ARG_SRC: mem(pd.src_desc(), x),
        dnnl.ARG_DIFF_DST: mem(pd.diff_dst_desc(), dy), dnnl.ARG_DIFF_WEIGHTS: DW,
        dnnl.ARG_DIFF_BIAS: DB})
    s.wait()
    rw, rb = R.conv_backward_weights(x, dy, w.shape, S, [0, 0], P, P)
    return close(DW.to_numpy().reshape(rw.shape), rw) and close(DB.to_numpy(), rb)

results["col2im_nhwc_s2"] = bwd_d("nhwc", (1, 16, 5, 3), 2, [2, 2], [1, 1], "im2col_gemm")
results["col2im_nchw"] = bwd_d("nchw", (1, 2, 3, 5), 2, [1, 1], [1, 1], "im2col_gemm")
# (widths of 9 over work-groups of 4: the last group moved back)
results["direct_fwd_unpadded"] = direct("fwd", (1, 2, 5, 9), [2, 1], [1, 1], False)
results["direct_fwd_padded"] = direct("fwd", (1, 2, 3, 9), [1, 1], [1, 1], True)
results["direct_bwd_d_unpadded"] = direct("bwd_d", (1, 2, 5, 9), [1, 1], [1, 1], False)
results["direct_bwd_d_s2"] = direct("bwd_d", (1, 2, 5, 9), [2, 2], [1, 1], True)
results["direct_bwd_w_unpadded"] = direct("bwd_w", (1, 2, 4, 5), [2, 1], [1, 1], False)
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind simulator is not installed")
def test_col2im_and_direct_runtime_sizes_clean_under_oclgrind():
    results = run_probe(RT_BWD_PROBE, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results == {k: True for k in results} and len(results) == 7, results
