"""Vector stores of convolution outputs (``vload``/``vstore`` of whole channel vectors) in the
implicit-GEMM data kernel and in the GEMM behind a 1x1 im2col convolution, with and without
a sum post-op (scales 1, 0.5, 2), a ReLU after it, bias or none, against the numpy reference
convolution and post-ops. Row counts that are and are not whole register tiles (the moved
last tile stores only its own rows when it reads the destination)."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference import conv as R
from pydnnl.reference.post_ops import apply_post_ops

MD, F32, A = dnnl.memory.desc, dnnl.memory.data_type.f32, dnnl.algorithm

CHAINS = {
    "none": [],
    "relu": [("eltwise", A.eltwise_relu, 0.0)],
    "sum": [("sum", 1.0)],
    "sum_half": [("sum", 0.5)],
    "sum2_relu": [("sum", 2.0), ("eltwise", A.eltwise_relu, 0.0)],
    "sum_leaky": [("sum", 1.0), ("eltwise", A.eltwise_relu, 0.1)],
    "sum_tanh": [("sum", 0.5), ("eltwise", A.eltwise_tanh, 0.0)],  # lane stores
}


def _post_ops(chain):
    po = dnnl.post_ops()
    for op in chain:
        if op[0] == "sum":
            po.append_sum(op[1])
        else:
            po.append_eltwise(op[1], op[2], 0.0)
    return po


def _run(engine, stream, solver, chain, n, ic, oc, hw, k, stride, pad, bias=True):
    rng = np.random.default_rng(3)
    po = _post_ops(CHAINS[chain])
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    oh = (hw + 2 * pad - k) // stride + 1
    x = rng.standard_normal((n, ic, hw, hw)).astype(np.float32)
    w = (rng.standard_normal((oc, ic, k, k)) / np.sqrt(ic * k * k)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32) if bias else None
    prior = rng.standard_normal((n, oc, oh, oh)).astype(np.float32)
    pd = dnnl.convolution_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_inference, A.convolution_direct,
        MD([n, ic, hw, hw], F32, "acdb"), MD([oc, ic, k, k], F32, "any"),
        MD([oc], F32, "a") if bias else None, MD([n, oc, oh, oh], F32, "acdb"),
        [stride, stride], [pad, pad], [pad, pad], attr=attr, solver=solver)
    user_w = dnnl.memory(MD([oc, ic, k, k], F32, "abcd"), engine, w)
    wm = dnnl.memory(pd.weights_desc(), engine)
    dnnl.reorder(user_w, wm).execute(stream, user_w, wm)
    args = {dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine, x), dnnl.ARG_WEIGHTS: wm,
            dnnl.ARG_DST: dnnl.memory(pd.dst_desc(), engine, prior)}
    if bias:
        args[dnnl.ARG_BIAS] = dnnl.memory(pd.bias_desc(), engine, b)
    dnnl.convolution_forward(pd).execute(stream, args)
    stream.wait()
    ref = R.conv_forward(x, w, b, (stride, stride), (0, 0), (pad, pad), (pad, pad),
                         dtype=np.float64)
    ref = apply_post_ops(ref, po, prior, {})
    got = args[dnnl.ARG_DST].to_numpy()
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err <= 1e-5, f"{solver} {chain}: max relative error {err:.3g}"
    return pd


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("chain", list(CHAINS))
@pytest.mark.parametrize("shape", [
    (1, 3, 64, 23, 7, 2, 3),   # the stem's form: 12x12 rows, 64 channels
    (2, 8, 32, 9, 3, 1, 1),    # 162 rows
    (3, 16, 48, 5, 1, 1, 0),   # 75 rows
])
def test_implicit_gemm(engine, stream, chain, shape):
    _run(engine, stream, "implicit_gemm", chain, *shape)


@pytest.mark.parametrize("chain", ["none", "sum", "sum_half", "sum2_relu", "sum_leaky",
                                   "sum_tanh"])
@pytest.mark.parametrize("shape", [
    (1, 32, 64, 14, 1, 1, 0),  # res4a_branch2c's form, 196 rows
    (3, 16, 48, 7, 1, 1, 0),   # 147 rows
    (1, 24, 32, 5, 1, 1, 0),   # 25 rows
])
def test_im2col_gemm_1x1(engine, stream, chain, shape):
    _run(engine, stream, "im2col_gemm", chain, *shape)


@pytest.mark.parametrize("bias", [True, False])
def test_implicit_gemm_no_bias(engine, stream, bias):
    _run(engine, stream, "implicit_gemm", "sum_half", 2, 8, 32, 9, 3, 1, 1, bias=bias)
    _run(engine, stream, "im2col_gemm", "sum2_relu", 3, 16, 48, 7, 1, 1, 0, bias=bias)


def test_vector_rules():
    """The generators' rules: which chains take vector stores, and the C they write."""
    from pydnnl.kernels import conv_implicit_gemm as I
    from pydnnl.kernels import gemm as G

    relu = ("eltwise", int(A.eltwise_relu), 0.0, 0.0)
    code = I._vector_store(16, True, (("sum", 0.5, 0), relu))
    assert "vload16(0, out + oidx)" in code and "vstore16(pv, 0, out + oidx)" in code
    assert "0.5f" in code and "bias + bidx" in code
    P = G.GemmProblem
    bias = ((0, ((1, 0, ()), (1, 1, ()))), (1, 64), 64)  # one value per column
    assert G._vector_epilogue(P(64, 64, 32, beta=1.0, bias=bias, post_ops=(relu,)))
    # epilogues that do not read C keep their lane stores (code unchanged)
    assert not G._vector_epilogue(P(64, 64, 32, bias=bias, post_ops=(relu,)))
    tanh = ("eltwise", int(A.eltwise_tanh), 0.0, 0.0)
    assert not G._vector_epilogue(P(64, 64, 32, beta=1.0, post_ops=(tanh,)))
