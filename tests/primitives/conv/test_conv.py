"""Convolution primitives: construction forms, queries, layout negotiation (``any``, nhwc,
blocked), fused post-ops, the user scratchpad, verbose lines, Find and the perf database, and
the errors bad arguments raise. Numbers are checked against the float64 numpy reference.
"""
from __future__ import annotations

import pathlib
import sys
from dataclasses import replace

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from test_conv_helpers import F32, MD, Case, assert_close, post_ops_attr, run_op  # noqa: E402

import pydnnl as dnnl  # noqa: E402
from pydnnl.conv_shapes import ConvGeometry  # noqa: E402
from pydnnl.error import error, invalid_arguments, unimplemented  # noqa: E402
from pydnnl.primitives.conv import (  # noqa: E402
    ConvFindResult,
    convolution_backward_data,
    convolution_backward_weights,
    convolution_forward,
    deconvolution_backward_data,
    deconvolution_forward,
)
from pydnnl.reference import conv as R  # noqa: E402

FWD = dnnl.prop_kind.forward_training
AUTO, DIRECT, WINO = (dnnl.algorithm.convolution_auto, dnnl.algorithm.convolution_direct,
                      dnnl.algorithm.convolution_winograd)
# a small problem many tests share (its kernels are generated once)
C2 = Case("c2", 2, 1, 3, 4, (6, 5), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), grouped=False)
X_DIMS, W_DIMS, Y_DIMS = (2, 3, 6, 5), (4, 3, 3, 3), (2, 4, 6, 5)


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(X_DIMS).astype(np.float32),
            rng.standard_normal(W_DIMS).astype(np.float32),
            rng.standard_normal(4).astype(np.float32))


def _fwd(engine, stream, pd, x, w, b=None, prior=None):
    X = dnnl.memory(pd.src_desc(), engine, x)
    W = dnnl.memory(pd.weights_desc(), engine, w)
    Y = (dnnl.memory(pd.dst_desc(), engine, prior) if prior is not None
         else dnnl.memory(pd.dst_desc(), engine))
    args = {dnnl.ARG_SRC: X, dnnl.ARG_WEIGHTS: W, dnnl.ARG_DST: Y}
    if b is not None:
        args[dnnl.ARG_BIAS] = dnnl.memory(pd.bias_desc(), engine, b)
    convolution_forward(pd).execute(stream, args)
    stream.wait()
    return Y.to_numpy()


def _check(got, ref, rtol=1e-5):
    scale = float(np.abs(ref).max())
    assert float(np.abs(got - ref).max()) <= rtol * scale


# ---------------------------------------------------------------------------------------------
# construction forms and queries
# ---------------------------------------------------------------------------------------------
def test_overloads_positional_and_keywords(engine, stream):
    x, w, b = _data()
    ref = R.conv_forward(x, w, b, 1, 0, 1, 1, dtype=np.float64)
    ref_nb = R.conv_forward(x, w, None, 1, 0, 1, 1, dtype=np.float64)
    src, wei = MD(X_DIMS, F32, "nchw"), MD(W_DIMS, F32, "oihw")
    bia, dst = MD([4], F32, "x"), MD(Y_DIMS, F32, "nchw")
    forms = [
        # oneDNN v3: with dilates, with bias
        (lambda: convolution_forward.primitive_desc(engine, FWD, DIRECT, src, wei, bia, dst,
                                                    [1, 1], [0, 0], [1, 1], [1, 1]), True),
        # without dilates
        (lambda: convolution_forward.primitive_desc(engine, FWD, DIRECT, src, wei, bia, dst,
                                                    [1, 1], [1, 1], [1, 1]), True),
        # without bias, without dilates, attr positional
        (lambda: convolution_forward.primitive_desc(engine, FWD, DIRECT, src, wei, dst, [1, 1],
                                                    [1, 1], [1, 1], dnnl.primitive_attr()), False),
        # bias None, with dilates
        (lambda: convolution_forward.primitive_desc(engine, FWD, DIRECT, src, wei, None, dst,
                                                    [1, 1], [0, 0], [1, 1], [1, 1]), False),
        # every descriptor by keyword
        (lambda: convolution_forward.primitive_desc(
            engine, FWD, DIRECT, src_desc=src, weights_desc=wei, bias_desc=bia, dst_desc=dst,
            strides=[1, 1], dilates=[0, 0], padding_l=[1, 1], padding_r=[1, 1]), True),
        (lambda: convolution_forward.primitive_desc(
            aengine=engine, aprop_kind=FWD, aalgorithm=DIRECT, src_desc=src, weights_desc=wei,
            dst_desc=dst, strides=[1, 1], padding_l=[1, 1], padding_r=[1, 1], attr=None), False),
    ]
    for make, with_bias in forms:
        pd = make()
        got = _fwd(engine, stream, pd, x, w, b if with_bias else None)
        _check(got, ref if with_bias else ref_nb)
        assert pd.bias_desc().is_zero() != with_bias


def test_queries(engine):
    src, wei, bia = MD(X_DIMS, F32, "nchw"), MD(W_DIMS, F32, "oihw"), MD([4], F32, "x")
    dst = MD((2, 4, 6, 6), F32, "nchw")  # padding_r 2 along W
    pd = convolution_forward.primitive_desc(engine, dnnl.prop_kind.forward_inference, DIRECT,
                                            src, wei, bia, dst, [1, 1], [0, 0], [1, 1], [1, 2])
    assert pd.src_desc() == src and pd.weights_desc() == wei and pd.bias_desc() == bia
    assert pd.dst_desc() == dst and pd.query_md(dnnl.query.src_md) == src
    assert pd.get_strides() == [1, 1] and pd.get_dilations() == [0, 0]
    assert pd.get_padding_l() == [1, 1] and pd.get_padding_r() == [1, 2]
    assert pd.get_prop_kind() == dnnl.prop_kind.forward_inference
    assert pd.get_algorithm_kind() == DIRECT
    assert pd.impl_info_str() == "loopy:direct" and pd.get_solver() == "direct"
    assert pd.get_engine() == engine
    assert isinstance(pd.scratchpad_desc(), dnnl.memory.desc)
    bd = convolution_backward_data.primitive_desc(engine, DIRECT, src, wei, dst, [1, 1], [0, 0],
                                                  [1, 1], [1, 2], pd)
    assert bd.diff_src_desc() == src and bd.weights_desc() == wei and bd.diff_dst_desc() == dst
    assert bd.get_prop_kind() == dnnl.prop_kind.backward_data
    bw = convolution_backward_weights.primitive_desc(engine, DIRECT, src, wei, bia, dst, [1, 1],
                                                     [0, 0], [1, 1], [1, 2], pd)
    assert bw.src_desc() == src and bw.diff_weights_desc() == wei and bw.diff_bias_desc() == bia
    assert bw.diff_dst_desc() == dst and bw.get_prop_kind() == dnnl.prop_kind.backward_weights


def test_user_scratchpad(engine, stream):
    """scratchpad_mode.user: the caller passes ARG_SCRATCHPAD of scratchpad_desc()."""
    x, w, b = _data(1)
    attr = dnnl.primitive_attr()
    attr.set_scratchpad_mode(dnnl.scratchpad_mode.user)
    pd = convolution_forward.primitive_desc(
        engine, FWD, AUTO, MD(X_DIMS, F32, "nchw"), MD(W_DIMS, F32, "oihw"), MD([4], F32, "x"),
        MD(Y_DIMS, F32, "nchw"), [1, 1], [0, 0], [1, 1], [1, 1], attr, solver="im2col_gemm")
    sp = pd.scratchpad_desc()
    assert sp.get_size() > 0
    X, W = dnnl.memory(pd.src_desc(), engine, x), dnnl.memory(pd.weights_desc(), engine, w)
    B, Y = dnnl.memory(pd.bias_desc(), engine, b), dnnl.memory(pd.dst_desc(), engine)
    prim = convolution_forward(pd)
    args = {dnnl.ARG_SRC: X, dnnl.ARG_WEIGHTS: W, dnnl.ARG_BIAS: B, dnnl.ARG_DST: Y}
    with pytest.raises(invalid_arguments, match="ARG_SCRATCHPAD"):
        prim.execute(stream, args)
    prim.execute(stream, {**args, dnnl.ARG_SCRATCHPAD: dnnl.memory(sp, engine)})
    stream.wait()
    _check(Y.to_numpy(), R.conv_forward(x, w, b, 1, 0, 1, 1, dtype=np.float64))


def test_verbose_lines_name_the_solver(engine, stream, monkeypatch, capsys):
    monkeypatch.setenv("PYDNNL_VERBOSE", "1")
    x, w, b = _data(2)
    pd = convolution_forward.primitive_desc(
        engine, FWD, DIRECT, MD(X_DIMS, F32, "any"), MD(W_DIMS, F32, "any"), None,
        MD(Y_DIMS, F32, "any"), [1, 1], [0, 0], [1, 1], [1, 1])
    _fwd(engine, stream, pd, x, w)
    out = capsys.readouterr().out.splitlines()
    lines = [ln for ln in out if ln.startswith("pydnnl_verbose")]
    assert any(",create,convolution_forward,loopy:direct," in ln for ln in lines), out
    assert any(",exec,convolution_forward,loopy:direct," in ln for ln in lines), out


# ---------------------------------------------------------------------------------------------
# layouts
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("solver, act, wei", [("direct", "abcd", "abcd"),
                                               ("im2col_gemm", "acdb", "cdba"),
                                               ("winograd_f2x3", "acdb", "cdba")])
def test_any_resolves_to_the_solver_layouts(engine, stream, solver, act, wei):
    x, w, b = _data(3)
    pd = convolution_forward.primitive_desc(
        engine, FWD, AUTO, MD(X_DIMS, F32, "any"), MD(W_DIMS, F32, "any"), MD([4], F32, "any"),
        MD(Y_DIMS, F32, "any"), [1, 1], [0, 0], [1, 1], [1, 1], solver=solver)
    assert pd.src_desc() == MD(X_DIMS, F32, act)
    assert pd.dst_desc() == MD(Y_DIMS, F32, act)
    wmd = pd.weights_desc()
    if solver == "im2col_gemm" and wmd.inner_blks:  # the GEMM's packed panels (packed B)
        assert wmd == MD(W_DIMS, F32, f"Acdb{wmd.inner_blks[0]}a")
    else:
        assert wmd == MD(W_DIMS, F32, wei)
    assert pd.bias_desc() == MD([4], F32, "a")
    assert solver in pd.impl_info_str()
    _check(_fwd(engine, stream, pd, x, w, b), R.conv_forward(x, w, b, 1, 0, 1, 1, dtype=np.float64),
           3e-5 if solver == "winograd_f2x3" else 1e-5)


def test_any_follows_the_given_layouts(engine):
    # dst any follows a concrete src
    pd = convolution_forward.primitive_desc(
        engine, FWD, AUTO, MD(X_DIMS, F32, "nhwc"), MD(W_DIMS, F32, "any"), None,
        MD(Y_DIMS, F32, "any"), [1, 1], [0, 0], [1, 1], [1, 1], solver="direct")
    assert pd.dst_desc() == MD(Y_DIMS, F32, "nhwc")
    # grouped weights: goihw for direct; backward descs with any take the hint's layouts
    g = MD((2, 2, 3, 3, 3), F32, "any")
    pd = convolution_forward.primitive_desc(
        engine, FWD, AUTO, MD((1, 6, 5, 5), F32, "any"), g, None, MD((1, 4, 5, 5), F32, "any"),
        [1, 1], [0, 0], [1, 1], [1, 1], solver="im2col_gemm")
    assert pd.weights_desc() == MD((2, 2, 3, 3, 3), F32, "adecb")
    bd = convolution_backward_data.primitive_desc(
        engine, AUTO, MD((1, 6, 5, 5), F32, "any"), g, MD((1, 4, 5, 5), F32, "any"), [1, 1],
        [0, 0], [1, 1], [1, 1], pd, solver="direct")
    assert bd.weights_desc() == pd.weights_desc()
    assert bd.diff_src_desc() == pd.src_desc() and bd.diff_dst_desc() == pd.dst_desc()


# (plain nchw / oihw: the direct solver's own choice for ``any``, used all over the sweep)
LAYOUTS = {
    "nhwc": {"src": "nhwc", "wei": "ohwi", "dst": "nhwc"},
    "blocked": {"src": "nChw8c", "wei": "OIhw8i8o", "dst": "nChw8c"},
    "mixed": {"src": "nChw8c", "wei": "hwio", "dst": "nhwc"},
}


@pytest.mark.parametrize("direction", ["fwd", "bwd_d", "bwd_w"])
@pytest.mark.parametrize("solver", ["direct", "im2col_gemm"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_explicit_layouts(engine, stream, layout, solver, direction):
    """Plain, channels-last and blocked (padded channel blocks) layouts, as given."""
    case = Case("lay", 2, 1, 10, 9, (5, 4), (3, 2), (1, 2), (0, 0), (1, 0), (1, 1), grouped=False)
    res = run_op(engine, stream, "conv", direction, case, solver=solver, tags=LAYOUTS[layout],
                 seed=5)
    for k, tag in LAYOUTS[layout].items():
        dims = {"src": (2, 10, 5, 4), "wei": (9, 10, 3, 2)}.get(k)
        if dims is None:
            continue
        pd = res.pd
        q = {"src": pd.src_desc() if direction != "bwd_d" else pd.diff_src_desc(),
             "wei": pd.weights_desc() if direction != "bwd_w" else pd.diff_weights_desc()}[k]
        assert q == MD(dims, F32, tag)
    assert_close(res, 1e-5, f"{layout} {solver} {direction}")


def test_winograd_blocked_layout(engine, stream):
    case = Case("wb", 1, 1, 8, 16, (6, 7), (3, 3), (1, 1), (0, 0), (1, 1), (1, 1), grouped=False)
    res = run_op(engine, stream, "conv", "fwd", case, algorithm=WINO,
                 tags={"src": "nChw8c", "wei": "OIhw8i8o", "dst": "nChw16c"})
    assert_close(res, 3e-5, "winograd blocked")


# ---------------------------------------------------------------------------------------------
# post-ops
# ---------------------------------------------------------------------------------------------
POST_OPS = {
    "relu": [(dnnl.algorithm.eltwise_relu, 0.0, 0.0)],
    "sum_relu": [("sum", 1.0), (dnnl.algorithm.eltwise_relu, 0.0, 0.0)],
    "sum_scaled": [("sum", 0.5)],
    "leaky_sum_linear": [(dnnl.algorithm.eltwise_relu, 0.2, 0.0), ("sum", 2.0),
                         (dnnl.algorithm.eltwise_linear, 0.5, -1.0)],
    "sum_zp_tanh_clip": [("sum", 1.0, 1), (dnnl.algorithm.eltwise_tanh, 0.0, 0.0),
                         (dnnl.algorithm.eltwise_clip, -0.5, 0.5)],
}


@pytest.mark.parametrize("solver", ["direct", "im2col_gemm", "winograd_f2x3"])
@pytest.mark.parametrize("ops", list(POST_OPS))
def test_post_ops_fused(engine, stream, solver, ops):
    attr, po = post_ops_attr(POST_OPS[ops])
    case = C2
    res = run_op(engine, stream, "conv", "fwd", case, solver=solver, attr=attr, post_ops=po,
                 seed=11, tags={"src": "nchw"} if ops == "relu" else None)
    assert solver in res.pd.impl_info_str()
    assert_close(res, 3e-5 if solver == "winograd_f2x3" else 1e-5, f"{ops} {solver}")


@pytest.mark.parametrize("solver", ["direct", "im2col_gemm"])
def test_post_ops_deconvolution_forward(engine, stream, solver):
    attr, po = post_ops_attr(POST_OPS["sum_relu"])
    case = Case("d", 2, 2, 4, 6, (4, 5), (3, 2), (2, 1), (0, 0), (1, 0), (0, 1))
    res = run_op(engine, stream, "deconv", "fwd", case, solver=solver, attr=attr, post_ops=po)
    assert_close(res, 1e-5, f"deconv post-ops {solver}")


def test_post_ops_1x1_in_place(engine, stream):
    """1x1 convolution: the GEMM writes dst in place; sum rides on its beta."""
    attr, po = post_ops_attr(POST_OPS["sum_relu"])
    case = Case("p1", 2, 1, 6, 5, (4, 3), (1, 1), (1, 1), (0, 0), (0, 0), (0, 0), grouped=False)
    res = run_op(engine, stream, "conv", "fwd", case, solver="im2col_gemm", attr=attr, post_ops=po)
    assert_close(res, 1e-5, "1x1 post-ops")


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------
def _pd(engine, src=X_DIMS, wei=W_DIMS, dst=Y_DIMS, s=(1, 1), d=(0, 0), pl=(1, 1), pr=(1, 1),
        alg=AUTO, dt=F32, bias=None, **kw):
    return convolution_forward.primitive_desc(
        engine, FWD, alg, MD(src, dt, "any"), MD(wei, F32, "any"),
        None if bias is None else MD(bias, F32, "any"), MD(dst, F32, "any"), list(s), list(d),
        list(pl), list(pr), **kw)


@pytest.mark.parametrize("kw, cls, match", [
    (dict(wei=(4, 2, 3, 3)), invalid_arguments, r"channel/group mismatch.*IC=3"),
    (dict(src=(2, 6, 6, 5), wei=(2, 2, 2, 3, 3)), invalid_arguments, r"channel/group mismatch"),
    (dict(src=(2, 3, 2, 2), wei=(4, 3, 3, 3), dst=(2, 4, 1, 1), pl=(0, 0), pr=(0, 0)),
     invalid_arguments, r"non-positive output size along H"),
    (dict(src=(2, 3, 4, 4), d=(2, 2), dst=(2, 4, 1, 1), pl=(0, 0), pr=(0, 0)),
     invalid_arguments, r"dilation too large"),
    (dict(wei=(4, 3, 3)), invalid_arguments, r"weights rank must be 4.*or 5"),
    (dict(wei=(1, 1, 4, 3, 3, 3)), invalid_arguments, r"weights rank"),
    (dict(dst=(2, 4, 5, 5)), invalid_arguments, r"dst_desc dims \[2, 4, 5, 5\] do not match"),
    (dict(bias=(5,)), invalid_arguments, r"bias dims must be \[OC\] = \[4\]"),
    (dict(dt=dnnl.memory.data_type.f16), unimplemented, r"weights_desc .*f32 with src_desc f16"),
    (dict(s=(1,)), invalid_arguments, r"strides must have 2"),
    (dict(alg=dnnl.algorithm.eltwise_relu), invalid_arguments, r"algorithm must be one of"),
    (dict(alg=dnnl.algorithm.deconvolution_direct), invalid_arguments, r"algorithm must be"),
    (dict(alg=WINO, s=(2, 2), dst=(2, 4, 3, 3)), unimplemented, r"Winograd.*stride 1"),
    (dict(solver="gemm_magic"), invalid_arguments, r"unknown solver 'gemm_magic'"),
    (dict(alg=DIRECT, solver="winograd_f2x3"), invalid_arguments, r"does not implement"),
    (dict(foo=1), invalid_arguments, r"unknown keyword argument\(s\) foo"),
])
def test_bad_forward_arguments(engine, kw, cls, match):
    with pytest.raises(cls, match=match):
        _pd(engine, **kw)


def test_bad_arguments_other_forms(engine):
    src, wei, dst = MD(X_DIMS, F32, "any"), MD(W_DIMS, F32, "any"), MD(Y_DIMS, F32, "any")
    with pytest.raises(invalid_arguments, match="prop_kind must be forward"):
        convolution_forward.primitive_desc(engine, dnnl.prop_kind.backward_data, AUTO, src, wei,
                                           dst, [1, 1], [1, 1], [1, 1])
    with pytest.raises(invalid_arguments, match="expected memory descs"):
        convolution_forward.primitive_desc(engine, FWD, AUTO, src, wei, [1, 1], [1, 1], [1, 1])
    with pytest.raises(invalid_arguments, match="expected lists strides"):
        convolution_forward.primitive_desc(engine, FWD, AUTO, src, wei, dst, [1, 1], [1, 1])
    with pytest.raises(invalid_arguments, match="unexpected positional argument 'nchw'"):
        convolution_forward.primitive_desc(engine, FWD, AUTO, src, "nchw", dst, [1, 1], [1, 1],
                                           [1, 1])
    with pytest.raises(invalid_arguments, match="weights_desc must be a memory.desc"):
        convolution_forward.primitive_desc(engine, FWD, AUTO, src_desc=src, weights_desc="oihw",
                                           dst_desc=dst, strides=[1, 1], padding_l=[1, 1],
                                           padding_r=[1, 1])
    with pytest.raises(invalid_arguments, match="engine"):
        convolution_forward.primitive_desc("cpu", FWD, AUTO, src, wei, dst, [1, 1], [1, 1], [1, 1])
    attr, _ = post_ops_attr([(dnnl.algorithm.eltwise_relu, 0.0, 0.0)])
    fwd = convolution_forward.primitive_desc(engine, FWD, AUTO, src, wei, dst, [1, 1], [1, 1],
                                             [1, 1])
    with pytest.raises(unimplemented, match="post-ops apply to forward"):
        convolution_backward_data.primitive_desc(engine, AUTO, src, wei, dst, [1, 1], [1, 1],
                                                 [1, 1], fwd, attr)
    attr = dnnl.primitive_attr()
    attr.set_scales_mask(dnnl.ARG_SRC, 0)
    with pytest.raises(unimplemented, match="scales"):
        convolution_forward.primitive_desc(engine, FWD, AUTO, src, wei, dst, [1, 1], [1, 1],
                                           [1, 1], attr)
    # deconvolution: its output-size rule, its weights [OC, IC, k...]
    with pytest.raises(invalid_arguments, match=r"output size along W is -1 <= 0"):
        deconvolution_forward.primitive_desc(
            engine, FWD, dnnl.algorithm.deconvolution_direct, MD((1, 3, 2, 2), F32, "any"),
            MD((4, 3, 2, 2), F32, "any"), None, MD((1, 4, 1, 1), F32, "any"), [1, 1],
            [1, 2], [1, 2])
    with pytest.raises(invalid_arguments, match=r"channel/group mismatch.*IC=3"):
        deconvolution_forward.primitive_desc(
            engine, FWD, dnnl.algorithm.deconvolution_direct, MD((1, 3, 2, 2), F32, "any"),
            MD((4, 2, 2, 2), F32, "any"), None, MD((1, 4, 3, 3), F32, "any"), [1, 1], [0, 0],
            [0, 0])
    # nothing above is an error of another kind
    assert issubclass(invalid_arguments, error) and issubclass(unimplemented, error)


def test_mismatched_hint_fwd_pd(engine):
    src, wei, dst = MD(X_DIMS, F32, "any"), MD(W_DIMS, F32, "any"), MD(Y_DIMS, F32, "any")
    fwd = convolution_forward.primitive_desc(engine, FWD, AUTO, src, wei, dst, [1, 1], [1, 1],
                                             [1, 1])
    other = convolution_forward.primitive_desc(
        engine, FWD, AUTO, src, wei, MD((2, 4, 4, 3), F32, "any"), [1, 1], [0, 0], [0, 0])
    with pytest.raises(invalid_arguments, match=r"hint_fwd_pd does not match: its dst dims"):
        convolution_backward_data.primitive_desc(engine, AUTO, src, wei, dst, [1, 1], [1, 1],
                                                 [1, 1], other)
    with pytest.raises(invalid_arguments, match=r"hint_fwd_pd does not match: its padding_l"):
        convolution_backward_weights.primitive_desc(
            engine, AUTO, src, wei, dst, [1, 1], [1, 1], [1, 1],
            convolution_forward.primitive_desc(engine, FWD, AUTO, src, wei, dst, [1, 1], [1, 0],
                                               [1, 2]))
    dfwd = deconvolution_forward.primitive_desc(
        engine, FWD, dnnl.algorithm.deconvolution_direct, MD(Y_DIMS, F32, "any"),
        MD((3, 4, 3, 3), F32, "any"), MD(X_DIMS, F32, "any"), [1, 1], [1, 1], [1, 1])
    with pytest.raises(invalid_arguments, match="hint_fwd_pd must be a convolution_forward"):
        convolution_backward_data.primitive_desc(engine, AUTO, src, wei, dst, [1, 1], [1, 1],
                                                 [1, 1], dfwd)
    with pytest.raises(invalid_arguments, match="hint_fwd_pd must be a deconvolution_forward"):
        deconvolution_backward_data.primitive_desc(
            engine, dnnl.algorithm.deconvolution_direct, MD(Y_DIMS, F32, "any"),
            MD((3, 4, 3, 3), F32, "any"), MD(X_DIMS, F32, "any"), [1, 1], [1, 1], [1, 1], fwd)


def test_execute_checks_arguments(engine, stream):
    x, w, b = _data()
    pd = convolution_forward.primitive_desc(
        engine, FWD, DIRECT, MD(X_DIMS, F32, "nchw"), MD(W_DIMS, F32, "oihw"), None,
        MD(Y_DIMS, F32, "nchw"), [1, 1], [0, 0], [1, 1], [1, 1])
    prim = convolution_forward(pd)
    X = dnnl.memory(MD(X_DIMS, F32, "nhwc"), engine, x)
    W = dnnl.memory(pd.weights_desc(), engine, w)
    Y = dnnl.memory(pd.dst_desc(), engine)
    with pytest.raises(invalid_arguments, match="ARG_SRC has desc"):
        prim.execute(stream, {dnnl.ARG_SRC: X, dnnl.ARG_WEIGHTS: W, dnnl.ARG_DST: Y})
    with pytest.raises(invalid_arguments, match="missing argument ARG_WEIGHTS"):
        prim.execute(stream, {dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine), dnnl.ARG_DST: Y})
    with pytest.raises(invalid_arguments,
                       match="expected a convolution_backward_data.primitive_desc"):
        convolution_backward_data(pd)


# ---------------------------------------------------------------------------------------------
# find and the perf database
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def perf_db(tmp_path, monkeypatch):
    path = tmp_path / "perf.sqlite"
    monkeypatch.setenv("PYDNNL_PERF_DB", str(path))
    return path


def _find_args():
    return (MD((1, 8, 6, 6), F32, "any"), MD((8, 8, 3, 3), F32, "any"), MD([8], F32, "any"),
            MD((1, 8, 6, 6), F32, "any"), [1, 1], [0, 0], [1, 1], [1, 1])


def test_find_ranks_solvers_and_auto_uses_the_best(engine, perf_db):
    res = convolution_forward.find(engine, FWD, *_find_args())
    assert [type(r) for r in res] == [ConvFindResult] * len(res)
    assert {r.solver for r in res} == {"direct", "im2col_gemm", "implicit_gemm", "winograd_f2x3",
                                       "fft"}
    times = [r.time_ms for r in res]
    assert times == sorted(times) and all(t > 0 for t in times)
    algs = {r.solver: r.algorithm for r in res}
    assert algs["winograd_f2x3"] == WINO and algs["direct"] == DIRECT == algs["fft"]
    assert all(r.workspace_bytes >= 0 for r in res)
    pd = convolution_forward.primitive_desc(engine, FWD, AUTO, *_find_args())
    assert pd.impl_info_str() == f"loopy:{res[0].solver}"
    from pydnnl.tuning import PerfDB

    assert perf_db.exists()
    entries = PerfDB.default().entries()
    assert [e[3]["solver"] for e in entries if e[1] == "conv_find"] == [res[0].solver]


@pytest.mark.parametrize("stored", ["direct", "winograd_f2x3", "im2col_gemm", "fft"])
def test_auto_takes_the_stored_find_result(engine, perf_db, stored):
    """A stored find result decides ``convolution_auto`` (not the heuristic)."""
    from pydnnl.tuning import PerfDB

    pd = convolution_forward.primitive_desc(engine, FWD, AUTO, *_find_args())
    PerfDB.default().put(engine.info.signature, "conv_find", pd.find_key(),
                         {"solver": stored, "params": {}}, 1.0)
    pd2 = convolution_forward.primitive_desc(engine, FWD, AUTO, *_find_args())
    assert pd2.impl_info_str() == f"loopy:{stored}"
    # convolution_direct takes a stored result of its family (every non-Winograd solver),
    # never a Winograd one
    from pydnnl.primitives.conv.solvers import solvers

    pd3 = convolution_forward.primitive_desc(engine, FWD, DIRECT, *_find_args())
    got = pd3.impl_info_str().split(":", 1)[1]
    assert solvers()[got].family == "direct"
    if solvers()[stored].family == "direct":
        assert got == stored


def test_find_backward_and_deconvolution(first_engine, perf_db):
    """find's coverage and ranking of the backward and deconvolution solvers, on the first
    device (each solver's kernels are checked on every device by test_conv_solvers; PoCL
    compiling every solver's here took 45 s of the suite)."""
    engine = first_engine
    src, wei = MD((1, 4, 5, 5), F32, "any"), MD((6, 4, 3, 3), F32, "any")
    dst = MD((1, 6, 3, 3), F32, "any")
    res = convolution_backward_data.find(engine, src, wei, dst, [1, 1], [0, 0], [0, 0], [0, 0])
    assert {r.solver for r in res} == {"direct", "im2col_gemm", "implicit_gemm", "fft",
                                       "winograd_f2x3"}
    res = convolution_backward_weights.find(engine, src, wei, MD([6], F32, "any"), dst, [1, 1],
                                            [0, 0], [0, 0], [0, 0], exhaustive=True)
    assert len(res) > 2 and [r.time_ms for r in res] == sorted(r.time_ms for r in res)
    res = deconvolution_forward.find(engine, FWD, dst, MD((4, 6, 3, 3), F32, "any"), None, src,
                                     [1, 1], [0, 0], [0, 0], [0, 0])
    assert {r.solver for r in res} == {"direct", "im2col_gemm", "implicit_gemm", "fft",
                                       "winograd_f2x3"}
    assert all(r.algorithm == (dnnl.algorithm.deconvolution_winograd
                               if r.solver == "winograd_f2x3"
                               else dnnl.algorithm.deconvolution_direct) for r in res)


def test_heuristic_winograd_first_on_gpus_and_wide_cpu_layers(engine):
    """3x3 stride-1 forward and backward-data layers: Winograd first on GPUs and, on CPUs,
    with >= 64 channels each side and >= 32 output tiles (last with 32 channels); backward
    weights first on >= 28x28 maps (CPUs: also where forward takes it); never for strided
    or dilated problems."""
    from pydnnl.primitives.conv.solvers import heuristic_order

    geom = ConvGeometry(mb=1, groups=1, ic=64, oc=64, src_spatial=(28, 28),
                        dst_spatial=(28, 28), kernel=(3, 3), strides=(1, 1), dilates=(0, 0),
                        padding_l=(1, 1), padding_r=(1, 1))
    gpu = engine.info.type == "gpu"
    assert heuristic_order("fwd", geom, engine)[0] == "winograd_f2x3"
    order = heuristic_order("fwd", replace(geom, ic=32, oc=32), engine)
    assert (order[0] == "winograd_f2x3") == gpu and "winograd_f2x3" in order
    if not gpu:
        assert order.index("winograd_f2x3") > order.index("im2col_gemm")
    wide = replace(geom, ic=128, oc=256)
    assert heuristic_order("fwd", wide, engine)[0] == "winograd_f2x3"
    assert heuristic_order("bwd_d", wide, engine)[0] == "winograd_f2x3"
    # 7x7 maps at mb1: 16 output tiles do not pay for the filter transform on CPUs
    few = replace(wide, src_spatial=(7, 7), dst_spatial=(7, 7))
    assert (heuristic_order("bwd_d", few, engine)[0] == "winograd_f2x3") == gpu
    for kind, change in (("fwd", {"strides": (2, 2), "dst_spatial": (14, 14)}),
                         ("fwd", {"dilates": (1, 1), "dst_spatial": (26, 26)})):
        assert "winograd_f2x3" not in heuristic_order(kind, replace(wide, **change), engine)
    # backward weights: first on 28x28 maps and larger, on every device; on 14x14 at mb 1
    # (49 tiles) first on CPUs (wide, as forward) and last on GPUs; on GPUs first again with
    # >= 512 tiles (mb 32: 1568); 7x7 at mb 1 (16 tiles) last everywhere
    assert heuristic_order("bwd_w", geom, engine)[0] == "winograd_f2x3"
    small_maps = replace(wide, src_spatial=(14, 14), dst_spatial=(14, 14))
    if gpu:
        assert heuristic_order("bwd_w", small_maps, engine)[-2:] == ["winograd_f2x3", "fft"]
    else:
        assert heuristic_order("bwd_w", small_maps, engine)[0] == "winograd_f2x3"
    order = heuristic_order("bwd_w", replace(small_maps, mb=32), engine)
    assert order[0] == "winograd_f2x3"
    assert heuristic_order("bwd_w", few, engine)[-2:] == ["winograd_f2x3", "fft"]
