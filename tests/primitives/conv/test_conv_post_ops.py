"""Post-op chains fused into every convolution solver's store: eltwise (every algorithm),
sum and binary (full, per-channel and scalar operands), against the reference convolution
followed by the reference post-ops."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference import conv as R
from pydnnl.reference.post_ops import apply_post_ops

MD, F32, A = dnnl.memory.desc, dnnl.memory.data_type.f32, dnnl.algorithm
N, IC, OC, H, W = 2, 8, 16, 6, 6
SOLVERS = ["direct", "im2col_gemm", "implicit_gemm", "winograd_f2x3", "fft"]


def _chain(kind):
    """(post_ops, operand dims per binary entry) of a named chain (dst [N, OC, H, W])."""
    po, srcs = dnnl.post_ops(), {}
    if kind == "binary":
        po.append_binary(A.binary_add, MD([1, OC, 1, 1], F32, "abcd"))
        srcs[0] = (1, OC, 1, 1)
        po.append_eltwise(A.eltwise_gelu_erf, 0.0, 0.0)
        po.append_binary(A.binary_mul, MD([N, OC, H, W], F32, "acdb"))
        srcs[2] = (N, OC, H, W)
    elif kind == "sum_binary":
        po.append_sum(0.5)
        po.append_binary(A.binary_max, MD([1, 1, 1, 1], F32, "abcd"))
        srcs[1] = (1, 1, 1, 1)
        po.append_eltwise(A.eltwise_hardswish, 1 / 6, 0.5)
        po.append_binary(A.binary_lt, MD([1, 1, H, 1], F32, "abcd"))
        srcs[3] = (1, 1, H, 1)
    elif kind == "sum_eltwise":
        po.append_sum(0.5)
        po.append_eltwise(A.eltwise_elu, 0.3, 0.0)
    else:
        po.append_eltwise(getattr(A, kind), 0.5 if kind == "eltwise_swish" else 0.0, 0.0)
    return po, srcs


def _run(engine, stream, solver, kind, dst_tag="abcd", op="conv"):
    rng = np.random.default_rng(7)
    po, srcs = _chain(kind)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    x = rng.standard_normal((N, IC, H, W)).astype(np.float32)
    w = rng.standard_normal((OC, IC, 3, 3)).astype(np.float32) / 8
    b = rng.standard_normal(OC).astype(np.float32)
    prior = rng.standard_normal((N, OC, H, W)).astype(np.float32)
    ops = {i: rng.standard_normal(d).astype(np.float32) for i, d in srcs.items()}
    cls = dnnl.convolution_forward if op == "conv" else dnnl.deconvolution_forward
    alg = A.convolution_auto if op == "conv" else A.deconvolution_direct
    wd = (OC, IC, 3, 3)  # deconvolution weights too: oneDNN's [OC, IC, k...]
    pd = cls.primitive_desc(engine, dnnl.prop_kind.forward_inference, alg,
                            MD([N, IC, H, W], F32, "abcd"), MD(wd, F32, "abcd"),
                            MD([OC], F32, "a"), MD([N, OC, H, W], F32, dst_tag),
                            [1, 1], [1, 1], [1, 1], attr=attr, solver=solver)
    args = {dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine, x),
            dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), engine, w),
            dnnl.ARG_BIAS: dnnl.memory(pd.bias_desc(), engine, b),
            dnnl.ARG_DST: dnnl.memory(pd.dst_desc(), engine, prior)}
    for i, a in ops.items():
        arg = dnnl.ARG_ATTR_MULTIPLE_POST_OP(i) | dnnl.ARG_SRC_1
        args[arg] = dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, arg), engine, a)
    cls(pd).execute(stream, args)
    stream.wait()
    if op == "conv":
        ref = R.conv_forward(x, w, b, (1, 1), (0, 0), (1, 1), (1, 1), dtype=np.float64)
    else:
        ref = R.deconv_forward(x, w, b, (1, 1), (0, 0), (1, 1), (1, 1), dtype=np.float64)
    ref = apply_post_ops(ref, po, prior, ops)
    got = args[dnnl.ARG_DST].to_numpy()
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err <= 1e-5, f"{solver} {kind}: max relative error {err:.3g}"
    return pd


@pytest.mark.parametrize("kind", ["binary", "sum_binary"])
@pytest.mark.parametrize("solver", SOLVERS)
def test_binary_and_sum_chains(engine, stream, solver, kind):
    _run(engine, stream, solver, kind)


@pytest.mark.parametrize("kind", ["eltwise_mish", "eltwise_hardswish", "eltwise_gelu_erf",
                                  "eltwise_swish", "eltwise_round", "eltwise_logistic"])
def test_every_eltwise_kind_fuses(engine, stream, kind):
    _run(engine, stream, "implicit_gemm", kind)


@pytest.mark.parametrize("solver", ["direct", "im2col_gemm"])
def test_nhwc_destination_and_deconvolution(engine, stream, solver):
    _run(engine, stream, solver, "binary", dst_tag="acdb")
    _run(engine, stream, solver, "sum_binary", op="deconv")


def test_binary_operand_is_validated_before_running(engine):
    po = dnnl.post_ops()
    po.append_binary(A.binary_add, MD([1, OC, 2, 1], F32, "abcd"))
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    with pytest.raises(dnnl.invalid_arguments, match="src1 dims"):
        dnnl.convolution_forward.primitive_desc(
            engine, dnnl.prop_kind.forward_inference, A.convolution_direct,
            MD([N, IC, H, W], F32, "abcd"), MD([OC, IC, 3, 3], F32, "abcd"),
            MD([N, OC, H, W], F32, "abcd"), [1, 1], [1, 1], [1, 1], attr=attr)
    with pytest.raises(dnnl.invalid_arguments, match="binary_"):
        dnnl.post_ops().append_binary(A.eltwise_relu, MD([1], F32, "a"))


@pytest.mark.parametrize("kind", ["eltwise_gelu_erf", "sum_eltwise"])
def test_im2col_channels_last_epilogue_rides_on_the_gemm(engine, stream, kind):
    """Forward into a channels-last dst: the bias and an eltwise chain (after a leading sum,
    the GEMM's beta) are applied by the GEMM's store, with no epilogue pass over dst."""
    pd = _run(engine, stream, "im2col_gemm", kind, dst_tag="acdb")
    plan = dnnl.convolution_forward(pd)._plan.describe()
    assert "conv_epilogue" not in plan and "gemm" in plan, plan
