"""The inner product primitives against the float64 numpy reference (its gradients checked by
finite differences) and ONNX's reference evaluator (Gemm with transB), in plain,
channels-last, blocked and transposed layouts, with and without bias; errors name the
argument."""
from __future__ import annotations

import re

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.inner_product import inner_product_forward as ref_ip

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
fwd = dnnl.prop_kind.forward_inference

CASES = {
    # name: (src dims, OC, src tag, weights tag, dst tag, bias)
    "2d": ([5, 7], 3, "ab", "ab", "ab", True),
    "2d_no_bias": ([4, 9], 6, "ab", "ab", "ab", False),
    "nchw_oihw": ([2, 3, 4, 5], 7, "abcd", "abcd", "ab", True),
    "nhwc_ohwi": ([2, 3, 4, 5], 7, "acdb", "acdb", "ab", True),       # staged copies
    "nchw_any_weights": ([3, 4, 2, 2], 5, "abcd", "any", "any", True),
    "blocked_src": ([2, 16, 3, 3], 4, "aBcd8b", "abcd", "ab", False),  # staged copy
    "transposed_dst": ([3, 6], 4, "ab", "ab", "ba", True),            # staged dst
    "3d_ncdhw": ([2, 2, 2, 3, 2], 3, "abcde", "abcde", "ab", True),
    # weights the forward GEMM reads in place: OC innermost (plain B) and packed panels
    "oc_innermost_2d": ([5, 7], 3, "ab", "ba", "ab", True),
    "oc_innermost_4d": ([2, 3, 2, 2], 5, "abcd", "bcda", "ab", False),
    "panels_2d": ([4, 6], 20, "ab", "Ab16a", "ab", True),            # OC padded to 32
    "panels_4d": ([3, 2, 2, 3], 5, "abcd", "Abcd8a", "ab", True),
}


def _run(engine, stream, x, w, b, src_tag, wei_tag, dst_tag):
    N, OC = x.shape[0], w.shape[0]
    src_md = dnnl.memory.desc(list(x.shape), dt.f32, src_tag)
    wei_md = dnnl.memory.desc(list(w.shape), dt.f32, wei_tag)
    dst_md = dnnl.memory.desc([N, OC], dt.f32, dst_tag)
    if b is None:
        pd = dnnl.inner_product_forward.primitive_desc(engine, fwd, src_md, wei_md, dst_md)
    else:
        pd = dnnl.inner_product_forward.primitive_desc(
            engine, fwd, src_md, wei_md, dnnl.memory.desc([OC], dt.f32, tag.a), dst_md)
    args = {dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine),
            dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), engine),
            dnnl.ARG_DST: dnnl.memory(pd.dst_desc(), engine)}
    args[dnnl.ARG_SRC].write(x)
    args[dnnl.ARG_WEIGHTS].write(w)
    if b is not None:
        args[dnnl.ARG_BIAS] = dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, dnnl.ARG_BIAS),
                                          engine, b)
    sp = pd.scratchpad_desc()
    dnnl.inner_product_forward(pd).execute(stream, args)
    stream.wait()
    return args[dnnl.ARG_DST].to_numpy(), sp


@pytest.mark.parametrize("name", list(CASES))
def test_matches_reference(engine, stream, name):
    dims, OC, st, wt, dtg, with_bias = CASES[name]
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal(dims).astype(np.float32)
    w = rng.standard_normal([OC] + dims[1:]).astype(np.float32)
    b = rng.standard_normal(OC).astype(np.float32) if with_bias else None
    got, _ = _run(engine, stream, x, w, b, st, wt, "ab" if dtg == "any" else dtg)
    want = ref_ip(x, w, b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()))


def test_any_layouts_resolve_to_what_the_gemm_reads_and_need_no_scratch(engine):
    any4 = dnnl.memory.desc([2, 3, 4, 4], dt.f32, tag.any)
    pd = dnnl.inner_product_forward.primitive_desc(
        engine, fwd, any4, dnnl.memory.desc([5, 3, 4, 4], dt.f32, tag.any),
        dnnl.memory.desc([5], dt.f32, tag.a), dnnl.memory.desc([2, 5], dt.f32, tag.any))
    assert pd.src_desc() == dnnl.memory.desc([2, 3, 4, 4], dt.f32, tag.nchw)
    # weights: the tuned GEMM's packed panels (Abcd<w>a) or OC innermost (plain B [K, OC])
    w = pd.weights_desc()
    assert w.format_name() == "bcda" or re.fullmatch(r"Abcd\d+a", w.format_name()), w
    assert pd.dst_desc() == dnnl.memory.desc([2, 5], dt.f32, tag.nc)
    assert pd.scratchpad_desc().is_zero()
    assert pd.get_prop_kind() == fwd


def test_matches_onnx_gemm(engine, stream):
    """ONNX's reference evaluator: Gemm(A, B, C) with transB = 1 is an inner product."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(3)
    a = rng.standard_normal((6, 10)).astype(np.float32)
    bw = rng.standard_normal((4, 10)).astype(np.float32)
    c = rng.standard_normal(4).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["A", "B", "C"], ["Y"], transB=1)], "ip",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, a.shape),
         helper.make_tensor_value_info("B", TensorProto.FLOAT, bw.shape),
         helper.make_tensor_value_info("C", TensorProto.FLOAT, c.shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (6, 4))])
    model = helper.make_model(graph)
    onnx.checker.check_model(model)
    (want,) = ReferenceEvaluator(model).run(None, {"A": a, "B": bw, "C": c})
    got, _ = _run(engine, stream, a, bw, c, "ab", "ab", "ab")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dims,match", [
    (([2, 3, 4], [5, 3, 5], [2, 5]), r"weights_desc dims \[5, 3, 5\] must be \[OC\]"),
    (([2, 3], [5, 3], [3, 5]), r"dst_desc dims \[3, 5\], expected \[N, OC\] = \[2, 5\]"),
    (([2], [5, 2], [2, 5]), "src_desc must have 2 to 5 dimensions"),
])
def test_shape_errors_name_the_argument(cpu_engine, dims, match):
    s, w, d = (dnnl.memory.desc(x, dt.f32, "abcde"[:len(x)]) for x in dims)
    with pytest.raises(dnnl.invalid_arguments, match=match):
        dnnl.inner_product_forward.primitive_desc(cpu_engine, fwd, s, w, d)


def test_bias_prop_and_type_errors(cpu_engine):
    s = dnnl.memory.desc([2, 3], dt.f32, tag.ab)
    w = dnnl.memory.desc([5, 3], dt.f32, tag.ab)
    d = dnnl.memory.desc([2, 5], dt.f32, tag.ab)
    with pytest.raises(dnnl.invalid_arguments, match=r"bias_desc dims \[4\], expected \[OC\]"):
        dnnl.inner_product_forward.primitive_desc(cpu_engine, fwd, s, w,
                                                  dnnl.memory.desc([4], dt.f32, tag.a), d)
    with pytest.raises(dnnl.invalid_arguments, match="forward_training or forward_inference"):
        dnnl.inner_product_forward.primitive_desc(cpu_engine, dnnl.prop_kind.backward, s, w, d)
    with pytest.raises(dnnl.unimplemented, match="weights_desc data type s8"):
        dnnl.inner_product_forward.primitive_desc(
            cpu_engine, fwd, s, dnnl.memory.desc([5, 3], dt.s8, tag.ab), d)


# -- backward --------------------------------------------------------------------------------
BWD = {
    "2d": ([5, 7], 3, "ab", "ab", "ab"),
    "nchw": ([2, 3, 2, 2], 4, "abcd", "abcd", "ab"),
    "nhwc_staged": ([2, 3, 2, 2], 4, "acdb", "acdb", "ba"),
    "blocked_src": ([2, 16, 2, 1], 3, "aBcd8b", "abcd", "ab"),
    # OC innermost (what the forward picks where its GEMM reads plain B): read and written
    # in place by the backward GEMMs
    "2d_oc_inner": ([5, 64], 40, "ab", "ba", "ab"),
    "nchw_oc_inner": ([2, 3, 2, 2], 4, "abcd", "bcda", "ab"),
}


@pytest.mark.parametrize("name", ["2d_oc_inner", "nchw_oc_inner"])
def test_backward_reads_and_writes_oc_innermost_weights_in_place(cpu_engine, name):
    """No staging copy of weights (backward data) or diff_weights (backward weights) laid
    out OC innermost: one GEMM each (plus the bias's column sums)."""
    dims, OC, st, wt, dtg = BWD[name]
    x_md = dnnl.memory.desc(dims, dt.f32, st)
    w_md = dnnl.memory.desc([OC] + dims[1:], dt.f32, wt)
    d_md = dnnl.memory.desc([dims[0], OC], dt.f32, dtg)
    hint = _fwd_pd(cpu_engine, x_md, w_md, d_md)
    bd = dnnl.inner_product_backward_data.primitive_desc(cpu_engine, x_md, w_md, d_md, hint)
    assert dnnl.inner_product_backward_data(bd)._plan.describe() == "gemmx1"
    bw = dnnl.inner_product_backward_weights.primitive_desc(
        cpu_engine, x_md, w_md, dnnl.memory.desc([OC], dt.f32, tag.a), d_md, hint)
    assert dnnl.inner_product_backward_weights(bw)._plan.describe() == "gemmx1 pydnnl_colsumx1"


def _fwd_pd(engine, x_md, w_md, d_md, bias=True):
    b_md = dnnl.memory.desc([w_md.dims[0]], dt.f32, tag.a) if bias else None
    return dnnl.inner_product_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_training, x_md, w_md, b_md, d_md)


def test_reference_gradients_by_finite_differences():
    """The closed-form reference gradients against central differences of the forward."""
    from pydnnl.reference.inner_product import (
        inner_product_backward_data,
        inner_product_backward_weights,
    )

    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((3, 2, 2)), rng.standard_normal((4, 2, 2))
    b, dd = rng.standard_normal(4), rng.standard_normal((3, 4))

    def loss(x_, w_, b_):
        return float((ref_ip(x_, w_, b_) * dd).sum())

    eps = 1e-6
    for arr, want in ((x, inner_product_backward_data(dd, w)),
                      (w, inner_product_backward_weights(x, dd)[0]),
                      (b, inner_product_backward_weights(x, dd)[1])):
        num = np.zeros_like(arr)
        for i in np.ndindex(arr.shape):
            old = arr[i]
            arr[i] = old + eps
            up = loss(x, w, b)
            arr[i] = old - eps
            down = loss(x, w, b)
            arr[i] = old
            num[i] = (up - down) / (2 * eps)
        np.testing.assert_allclose(want, num, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", list(BWD))
def test_backward_data_and_weights_match_reference(engine, stream, name):
    from pydnnl.reference.inner_product import (
        inner_product_backward_data,
        inner_product_backward_weights,
    )

    dims, OC, st, wt, dtg = BWD[name]
    rng = np.random.default_rng(len(name) + 1)
    x = rng.standard_normal(dims).astype(np.float32)
    w = rng.standard_normal([OC] + dims[1:]).astype(np.float32)
    dd = rng.standard_normal((dims[0], OC)).astype(np.float32)
    x_md = dnnl.memory.desc(dims, dt.f32, st)
    w_md = dnnl.memory.desc([OC] + dims[1:], dt.f32, wt)
    d_md = dnnl.memory.desc([dims[0], OC], dt.f32, dtg)
    hint = _fwd_pd(engine, x_md, w_md, d_md)

    bd = dnnl.inner_product_backward_data.primitive_desc(engine, x_md, w_md, d_md, hint)
    args = {dnnl.ARG_DIFF_DST: dnnl.memory(d_md, engine),
            dnnl.ARG_WEIGHTS: dnnl.memory(w_md, engine),
            dnnl.ARG_DIFF_SRC: dnnl.memory(x_md, engine)}
    args[dnnl.ARG_DIFF_DST].write(dd)
    args[dnnl.ARG_WEIGHTS].write(w)
    dnnl.inner_product_backward_data(bd).execute(stream, args)
    stream.wait()
    want = inner_product_backward_data(dd, w)
    np.testing.assert_allclose(args[dnnl.ARG_DIFF_SRC].to_numpy(), want, rtol=1e-5,
                               atol=1e-5 * max(1.0, np.abs(want).max()))

    bw = dnnl.inner_product_backward_weights.primitive_desc(
        engine, x_md, dnnl.memory.desc(w_md.dims, dt.f32, tag.any),
        dnnl.memory.desc([OC], dt.f32, tag.a), d_md, hint)
    assert bw.diff_weights_desc() == hint.weights_desc()  # any: the forward's choice
    args = {dnnl.ARG_SRC: dnnl.memory(x_md, engine),
            dnnl.ARG_DIFF_DST: dnnl.memory(d_md, engine),
            dnnl.ARG_DIFF_WEIGHTS: dnnl.memory(bw.diff_weights_desc(), engine),
            dnnl.ARG_DIFF_BIAS: dnnl.memory(dnnl.memory.desc([OC], dt.f32, tag.a), engine)}
    args[dnnl.ARG_SRC].write(x)
    args[dnnl.ARG_DIFF_DST].write(dd)
    dnnl.inner_product_backward_weights(bw).execute(stream, args)
    stream.wait()
    dw, db = inner_product_backward_weights(x, dd)
    np.testing.assert_allclose(args[dnnl.ARG_DIFF_WEIGHTS].to_numpy(), dw, rtol=1e-5,
                               atol=1e-5 * max(1.0, np.abs(dw).max()))
    np.testing.assert_allclose(args[dnnl.ARG_DIFF_BIAS].to_numpy(), db, rtol=1e-5, atol=1e-5)


def test_backward_needs_a_forward_hint(cpu_engine):
    md = dnnl.memory.desc([2, 3], dt.f32, tag.ab)
    w = dnnl.memory.desc([4, 3], dt.f32, tag.ab)
    d = dnnl.memory.desc([2, 4], dt.f32, tag.ab)
    with pytest.raises(dnnl.invalid_arguments, match="hint_fwd_pd must be an "
                                                      "inner_product_forward.primitive_desc"):
        dnnl.inner_product_backward_data.primitive_desc(cpu_engine, md, w, d, None)
    with pytest.raises(dnnl.invalid_arguments, match="missing"):
        dnnl.inner_product_backward_weights.primitive_desc(cpu_engine, md, w, d)


@pytest.mark.parametrize("dts", [("bf16", "bf16", "bf16", "f32"), ("f16", "f16", "f16", "f16"),
                                 ("bf16", "bf16", "f32", "bf16")])
def test_low_precision_data_accumulates_in_f32(engine, stream, dts):
    """bf16/f16 src, weights, dst and bias (oneDNN's GPU combinations): the product of the
    values as stored, accumulated in f32, rounded once into dst; forward, backward data and
    backward weights with diff_bias. Tolerance: one rounding of dst (bf16 2^-8, f16 2^-11
    relative to the output's magnitude) plus f32 accumulation."""
    sdt, wdt, ddt, bdt = (getattr(dt, d) for d in dts)
    N, IC, OC = 6, 40, 12
    rng = np.random.default_rng(2)

    def stored(a, t):  # the values a tensor of type t holds
        m = dnnl.memory(dnnl.memory.desc(list(a.shape), t, "ab"[:a.ndim] if a.ndim > 1 else "a"),
                        engine, a.astype(np.float32))
        return m.to_numpy().astype(np.float64)

    def tol(t):
        return {dt.bf16: 2.0 ** -8, dt.f16: 2.0 ** -11, dt.f32: 0.0}[t] + 1e-5

    x, w = rng.standard_normal((N, IC)), rng.standard_normal((OC, IC))
    b, dy = rng.standard_normal(OC), rng.standard_normal((N, OC))
    MD = dnnl.memory.desc
    fwd = dnnl.inner_product_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_training, MD([N, IC], sdt, "ab"), MD([OC, IC], wdt, "any"),
        MD([OC], bdt, "a"), MD([N, OC], ddt, "ab"))
    X = dnnl.memory(fwd.src_desc(), engine, x.astype(np.float32))
    W = dnnl.memory(fwd.weights_desc(), engine, w.astype(np.float32))
    B = dnnl.memory(MD([OC], bdt, "a"), engine, b.astype(np.float32))
    Y = dnnl.memory(fwd.dst_desc(), engine)
    dnnl.inner_product_forward(fwd).execute(stream, {dnnl.ARG_SRC: X, dnnl.ARG_WEIGHTS: W,
                                                     dnnl.ARG_BIAS: B, dnnl.ARG_DST: Y})
    stream.wait()  # to_numpy reads on the engine's queue, not on the stream
    xs, ws, bs = stored(x, sdt), stored(w, wdt), stored(b, bdt)
    want = xs @ ws.T + bs
    got = Y.to_numpy().astype(np.float64)
    assert np.abs(got - want).max() <= tol(ddt) * np.abs(want).max()

    bwd_d = dnnl.inner_product_backward_data.primitive_desc(
        engine, MD([N, IC], sdt, "ab"), MD([OC, IC], wdt, "any"), MD([N, OC], ddt, "ab"), fwd)
    DY = dnnl.memory(bwd_d.diff_dst_desc(), engine, dy.astype(np.float32))
    DX = dnnl.memory(bwd_d.diff_src_desc(), engine)
    dnnl.inner_product_backward_data(bwd_d).execute(stream, {dnnl.ARG_DIFF_DST: DY,
                                                             dnnl.ARG_WEIGHTS: W,
                                                             dnnl.ARG_DIFF_SRC: DX})
    stream.wait()
    dys = stored(dy, ddt)
    want = dys @ ws
    assert np.abs(DX.to_numpy() - want).max() <= tol(sdt) * np.abs(want).max()

    bwd_w = dnnl.inner_product_backward_weights.primitive_desc(
        engine, MD([N, IC], sdt, "ab"), MD([OC, IC], wdt, "any"), MD([OC], bdt, "a"),
        MD([N, OC], ddt, "ab"), fwd)
    DW = dnnl.memory(bwd_w.diff_weights_desc(), engine)
    DB = dnnl.memory(MD([OC], bdt, "a"), engine)
    dnnl.inner_product_backward_weights(bwd_w).execute(stream, {
        dnnl.ARG_SRC: X, dnnl.ARG_DIFF_DST: DY, dnnl.ARG_DIFF_WEIGHTS: DW,
        dnnl.ARG_DIFF_BIAS: DB})
    stream.wait()
    want_w, want_b = dys.T @ xs, dys.sum(0)
    assert np.abs(DW.to_numpy() - want_w).max() <= tol(wdt) * np.abs(want_w).max()
    assert np.abs(DB.to_numpy() - want_b).max() <= tol(bdt) * np.abs(want_b).max()
