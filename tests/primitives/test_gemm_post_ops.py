"""Bias and post-ops fused into the GEMM kernels of matmul and inner product: every GEMM path
(single, batched, one per batch entry, transposed dst, staged dst) against numpy products
followed by the reference post-ops."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.post_ops import apply_post_ops

MD, F32, A = dnnl.memory.desc, dnnl.memory.data_type.f32, dnnl.algorithm
TAGS = {2: "ab", 3: "abc", 4: "abcd"}


def _attr(entries):
    """(attr, post_ops, {index: operand dims}) from ``[("sum", s) | (alg, a, b) |
    ("binary", alg, dims, tag)]``."""
    po, dims = dnnl.post_ops(), {}
    for i, e in enumerate(entries):
        if e[0] == "sum":
            po.append_sum(e[1])
        elif e[0] == "binary":
            po.append_binary(e[1], MD(list(e[2]), F32, e[3]))
            dims[i] = e[2]
        else:
            po.append_eltwise(*e)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    return attr, po, dims


def _operands(engine, pd, dims, rng):
    vals, args = {}, {}
    for i, d in dims.items():
        arg = dnnl.ARG_ATTR_MULTIPLE_POST_OP(i) | dnnl.ARG_SRC_1
        vals[i] = rng.standard_normal(d).astype(np.float32)
        args[arg] = dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, arg), engine, vals[i])
    return vals, args


def _check(got, ref):
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err <= 1e-5, f"max relative error {err:.3g}"


MATMUL_CASES = {
    # name: (src dims, weights dims, dst dims, dst tag, bias dims, chain)
    "2d_full_chain": ((5, 7), (7, 9), (5, 9), "ab", (1, 9),
                      [("sum", 0.5), (A.eltwise_relu, 0.1, 0.0),
                       ("binary", A.binary_add, (1, 9), "ab"),
                       ("binary", A.binary_mul, (5, 9), "ba")]),
    "batched_fold": ((3, 4, 6), (3, 6, 5), (3, 4, 5), "abc", (3, 1, 5),
                     [(A.eltwise_gelu_erf, 0.0, 0.0), ("binary", A.binary_sub, (3, 1, 1), "abc"),
                      ("binary", A.binary_ge, (1, 4, 5), "abc")]),
    "per_entry": ((2, 3, 4, 6), (2, 1, 6, 5), (2, 3, 4, 5), "abcd", (1, 1, 1, 5),
                  [("binary", A.binary_max, (2, 3, 1, 5), "abcd"), ("sum", 1.0),
                   (A.eltwise_tanh, 0.0, 0.0)]),
    "transposed_dst": ((6, 8), (8, 4), (6, 4), "ba", None,
                       [("binary", A.binary_div, (6, 1), "ab"), (A.eltwise_mish, 0.0, 0.0)]),
}


@pytest.mark.parametrize("case", list(MATMUL_CASES))
def test_matmul_fused_bias_and_post_ops(engine, stream, case):
    sd, wd, dd, dtag, bd, chain = MATMUL_CASES[case]
    rng = np.random.default_rng(3)
    attr, po, dims = _attr(chain)
    x = rng.standard_normal(sd).astype(np.float32)
    w = rng.standard_normal(wd).astype(np.float32)
    prior = rng.standard_normal(dd).astype(np.float32)
    descs = [MD(sd, F32, TAGS[len(sd)]), MD(wd, F32, TAGS[len(wd)])]
    if bd is not None:
        descs.append(MD(bd, F32, TAGS[len(bd)]))
    pd = dnnl.matmul.primitive_desc(engine, *descs, MD(dd, F32, dtag), attr)
    vals, args = _operands(engine, pd, dims, rng)
    args.update({dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine, x),
                 dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), engine, w),
                 dnnl.ARG_DST: dnnl.memory(pd.dst_desc(), engine, prior)})
    ref = np.matmul(x.astype(np.float64), w.astype(np.float64))
    if bd is not None:
        b = rng.standard_normal(bd).astype(np.float32)
        args[dnnl.ARG_BIAS] = dnnl.memory(pd.query_md(dnnl.query.exec_arg_md, dnnl.ARG_BIAS),
                                          engine, b)
        ref = ref + b
    dnnl.matmul(pd).execute(stream, args)
    stream.wait()
    _check(args[dnnl.ARG_DST].to_numpy(), apply_post_ops(ref, po, prior, vals))


@pytest.mark.parametrize("dst_tag", ["ab", "ba"])  # "ba" is staged through the scratchpad
def test_inner_product_fused_bias_and_post_ops(engine, stream, dst_tag):
    N, IC, H, OC = 4, 3, 5, 6
    rng = np.random.default_rng(5)
    attr, po, dims = _attr([("sum", 2.0), ("binary", A.binary_add, (1, OC), "ab"),
                            (A.eltwise_hardswish, 1 / 6, 0.5),
                            ("binary", A.binary_lt, (N, 1), "ab")])
    x = rng.standard_normal((N, IC, H)).astype(np.float32)
    w = rng.standard_normal((OC, IC, H)).astype(np.float32)
    b = rng.standard_normal(OC).astype(np.float32)
    prior = rng.standard_normal((N, OC)).astype(np.float32)
    pd = dnnl.inner_product_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_inference, MD([N, IC, H], F32, "abc"),
        MD([OC, IC, H], F32, "abc"), MD([OC], F32, "a"), MD([N, OC], F32, dst_tag), attr)
    vals, args = _operands(engine, pd, dims, rng)
    args.update({dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine, x),
                 dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), engine, w),
                 dnnl.ARG_BIAS: dnnl.memory(pd.query_md(dnnl.query.exec_arg_md,
                                                        dnnl.ARG_BIAS), engine, b),
                 dnnl.ARG_DST: dnnl.memory(pd.dst_desc(), engine, prior)})
    dnnl.inner_product_forward(pd).execute(stream, args)
    stream.wait()
    ref = x.reshape(N, -1).astype(np.float64) @ w.reshape(OC, -1).T.astype(np.float64) + b
    _check(args[dnnl.ARG_DST].to_numpy(), apply_post_ops(ref, po, prior, vals))


def test_post_ops_show_in_verbose_and_bad_operands_fail_early(cpu_engine, capsys, monkeypatch):
    monkeypatch.setenv("PYDNNL_VERBOSE", "1")
    attr, _, _ = _attr([(A.eltwise_relu, 0.0, 0.0), ("binary", A.binary_add, (1, 3), "ab")])
    pd = dnnl.matmul.primitive_desc(cpu_engine, MD([2, 4], F32, "ab"), MD([4, 3], F32, "ab"),
                                    MD([2, 3], F32, "ab"), attr)
    dnnl.matmul(pd)
    assert "attr-post-ops:eltwise_relu:0:0+binary_add:1x3" in capsys.readouterr().out
    bad, _, _ = _attr([("binary", A.binary_add, (2, 2), "ab")])
    with pytest.raises(dnnl.invalid_arguments, match="src1 dims"):
        dnnl.matmul.primitive_desc(cpu_engine, MD([2, 4], F32, "ab"), MD([4, 3], F32, "ab"),
                                   MD([2, 3], F32, "ab"), bad)
    with pytest.raises(dnnl.unimplemented, match="forward propagation only"):
        fwd = dnnl.inner_product_forward.primitive_desc(
            cpu_engine, dnnl.prop_kind.forward_training, MD([2, 4], F32, "ab"),
            MD([3, 4], F32, "ab"), MD([2, 3], F32, "ab"))
        dnnl.inner_product_backward_data.primitive_desc(
            cpu_engine, MD([2, 4], F32, "ab"), MD([3, 4], F32, "ab"), MD([2, 3], F32, "ab"),
            fwd, attr)
