"""oneDNN's prelu post-op (``post_ops.append_prelu(mask)``): ``dst > 0 ? dst : w * dst`` with
f32 weights passed as ``ARG_ATTR_MULTIPLE_POST_OP(i) | ARG_WEIGHTS``, broadcast over the
destination's dims outside ``mask``. Fused by convolution (three solvers), deconvolution,
matmul and inner product, checked against float64 numpy; the primitives whose oneDNN post-op
set has no prelu refuse it, and a bad mask or a missing weights memory raises naming it."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels.post_ops import describe
from pydnnl.reference import conv as R

MD, F32, A = dnnl.memory.desc, dnnl.memory.data_type.f32, dnnl.algorithm
INF = dnnl.prop_kind.forward_inference


def _attr(*entries):
    """Post-ops from ``("prelu", mask)`` / ``("sum", scale)`` / ``("relu",)`` entries."""
    po = dnnl.post_ops()
    for e in entries:
        if e[0] == "prelu":
            po.append_prelu(e[1])
        elif e[0] == "sum":
            po.append_sum(e[1])
        else:
            po.append_eltwise(A.eltwise_relu, 0.0, 0.0)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    return attr


def _weights(rng, dims, mask):
    return rng.standard_normal([d if mask >> k & 1 else 1 for k, d in enumerate(dims)]) \
        .astype(np.float32)


def _prelu(y, w):
    return np.where(y > 0, y, y * w.astype(np.float64))


def _wmem(engine, pd, i, w):
    arg = dnnl.ARG_ATTR_MULTIPLE_POST_OP(i) | dnnl.ARG_WEIGHTS
    md = pd.query_md(dnnl.query.exec_arg_md, arg)
    assert list(md.dims) == list(w.shape) and md.data_type == F32
    return {arg: dnnl.memory(md, engine, w)}


@pytest.mark.parametrize("mask", [0, 2, 3])
def test_matmul(engine, stream, mask):
    rng = np.random.default_rng(mask)
    m, k, n = 6, 7, 9
    x = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    w = _weights(rng, (m, n), mask)
    pd = dnnl.matmul.primitive_desc(engine, MD([m, k], F32, "ab"), MD([k, n], F32, "ab"),
                                    MD([m, n], F32, "ab"), _attr(("prelu", mask)))
    dst = dnnl.memory(pd.dst_desc(), engine)
    dnnl.matmul(pd).execute(stream, {
        dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine, x),
        dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), engine, b), dnnl.ARG_DST: dst,
        **_wmem(engine, pd, 0, w)})
    stream.wait()
    np.testing.assert_allclose(dst.to_numpy(), _prelu(x.astype(np.float64) @ b, w),
                               rtol=1e-5, atol=1e-5)


def test_inner_product_after_relu_and_before_sum(engine, stream):
    rng = np.random.default_rng(7)
    mb, ic, oc = 4, 10, 6
    x = rng.standard_normal((mb, ic)).astype(np.float32)
    wt = rng.standard_normal((oc, ic)).astype(np.float32)
    w = _weights(rng, (mb, oc), 2)
    prior = rng.standard_normal((mb, oc)).astype(np.float32)
    # relu then prelu is relu: put prelu first, then the sum
    pd = dnnl.inner_product_forward.primitive_desc(
        engine, INF, MD([mb, ic], F32, "ab"), MD([oc, ic], F32, "ab"), MD([mb, oc], F32, "ab"),
        attr=_attr(("prelu", 2), ("sum", 0.5)))
    dst = dnnl.memory(pd.dst_desc(), engine, prior)
    dnnl.inner_product_forward(pd).execute(stream, {
        dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine, x),
        dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), engine, wt), dnnl.ARG_DST: dst,
        **_wmem(engine, pd, 0, w)})
    stream.wait()
    want = 0.5 * prior + _prelu(x.astype(np.float64) @ wt.T, w)
    np.testing.assert_allclose(dst.to_numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("solver", ["direct", "im2col_gemm", "winograd_f2x3"])
def test_convolution(engine, stream, solver):
    rng = np.random.default_rng(3)
    n, c, oc, h = 2, 4, 6, 6
    x = rng.standard_normal((n, c, h, h)).astype(np.float32)
    wt = rng.standard_normal((oc, c, 3, 3)).astype(np.float32) / 4
    w = _weights(rng, (n, oc, h, h), 2)
    pd = dnnl.convolution_forward.primitive_desc(
        engine, INF, A.convolution_auto, MD([n, c, h, h], F32, "abcd"),
        MD([oc, c, 3, 3], F32, "abcd"), MD([n, oc, h, h], F32, "abcd"), [1, 1], [1, 1],
        [1, 1], attr=_attr(("prelu", 2)), solver=solver)
    dst = dnnl.memory(pd.dst_desc(), engine)
    dnnl.convolution_forward(pd).execute(stream, {
        dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine, x),
        dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), engine, wt), dnnl.ARG_DST: dst,
        **_wmem(engine, pd, 0, w)})
    stream.wait()
    ref = R.conv_forward(x, wt, None, (1, 1), (0, 0), (1, 1), (1, 1), dtype=np.float64)
    np.testing.assert_allclose(dst.to_numpy(), _prelu(ref, w), rtol=1e-4, atol=1e-4)


def test_deconvolution(engine, stream):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
    wt = rng.standard_normal((6, 4, 2, 2)).astype(np.float32)
    w = _weights(rng, (1, 6, 6, 6), 2)
    pd = dnnl.deconvolution_forward.primitive_desc(
        engine, INF, A.deconvolution_direct, MD([1, 4, 3, 3], F32, "abcd"),
        MD([6, 4, 2, 2], F32, "abcd"), MD([1, 6, 6, 6], F32, "abcd"), [2, 2], [0, 0], [0, 0],
        attr=_attr(("prelu", 2)))
    dst = dnnl.memory(pd.dst_desc(), engine)
    dnnl.deconvolution_forward(pd).execute(stream, {
        dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine, x),
        dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), engine, wt), dnnl.ARG_DST: dst,
        **_wmem(engine, pd, 0, w)})
    stream.wait()
    ref = R.deconv_forward(x, wt, None, [2, 2], [0, 0], [0, 0], [0, 0])
    np.testing.assert_allclose(dst.to_numpy(), _prelu(ref, w), rtol=1e-4, atol=1e-4)


def test_refusals_and_errors(cpu_engine):
    eng = cpu_engine
    po = dnnl.post_ops()
    po.append_prelu(2)
    assert po.kind(0) == "prelu" and po.get_params_prelu(0) == 2
    with pytest.raises(dnnl.invalid_arguments, match="not a binary"):
        po.get_params_binary(0)
    with pytest.raises(dnnl.invalid_arguments, match="mask must be a non-negative int"):
        po.append_prelu(-1)
    md = MD([2, 3, 4, 5], F32, "abcd")
    with pytest.raises(dnnl.unimplemented, match="prelu.*eltwise_forward takes binary"):
        dnnl.eltwise_forward.primitive_desc(eng, INF, A.eltwise_relu, md, md,
                                            attr=_attr(("prelu", 2)))
    with pytest.raises(dnnl.invalid_arguments, match="mask 8 names a dim past"):
        dnnl.matmul.primitive_desc(eng, MD([2, 3], F32, "ab"), MD([3, 4], F32, "ab"),
                                   MD([2, 4], F32, "ab"), _attr(("prelu", 8)))
    pd = dnnl.matmul.primitive_desc(eng, MD([2, 3], F32, "ab"), MD([3, 4], F32, "ab"),
                                    MD([2, 4], F32, "ab"), _attr(("relu",), ("prelu", 2)))
    args = {a: dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, a), eng)
            for a in (dnnl.ARG_SRC, dnnl.ARG_WEIGHTS, dnnl.ARG_DST)}
    with pytest.raises(dnnl.invalid_arguments,
                       match=r"missing argument ARG_ATTR_MULTIPLE_POST_OP\(1\)\|ARG_WEIGHTS"):
        dnnl.matmul(pd).execute(dnnl.stream(eng), args)
    from pydnnl.primitives.post_ops import resolve

    chain, _ = resolve("matmul", _attr(("prelu", 2)), MD([2, 4], F32, "ab"),
                       allowed=("sum", "eltwise", "binary", "prelu"))
    assert describe(chain) == "prelu:1x4"
