"""The matmul primitive against the float64 numpy reference and ONNX's reference evaluator:
2-D and batched, transposed layouts, broadcast batch dimensions and bias, ``format_tag.any``,
and errors that name the argument."""
from __future__ import annotations

import re

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.matmul import matmul as ref_matmul

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag


def _run(engine, stream, a, b, bias=None, a_tag=None, b_tag=None, dst_tag=None):
    nd = a.ndim
    plain = "abcdefghijkl"[:nd]
    a_md = dnnl.memory.desc(list(a.shape), dt.f32, a_tag or plain)
    b_md = dnnl.memory.desc(list(b.shape), dt.f32, b_tag or plain)
    out_shape = list(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])) + [a.shape[-2],
                                                                        b.shape[-1]]
    d_md = dnnl.memory.desc(out_shape, dt.f32, dst_tag or tag.any)
    bias_md = None if bias is None else dnnl.memory.desc(list(bias.shape), dt.f32, plain)
    pd = (dnnl.matmul.primitive_desc(engine, a_md, b_md, d_md) if bias is None else
          dnnl.matmul.primitive_desc(engine, a_md, b_md, bias_md, d_md))
    mems = {dnnl.ARG_SRC: dnnl.memory(a_md, engine), dnnl.ARG_WEIGHTS: dnnl.memory(b_md, engine),
            dnnl.ARG_DST: dnnl.memory(pd.dst_desc(), engine)}
    mems[dnnl.ARG_SRC].write(a)
    mems[dnnl.ARG_WEIGHTS].write(b)
    if bias is not None:
        mems[dnnl.ARG_BIAS] = dnnl.memory(bias_md, engine, bias)
    dnnl.matmul(pd).execute(stream, mems)
    stream.wait()
    return mems[dnnl.ARG_DST].to_numpy()


CASES = {
    "2d": ((5, 7), (7, 3), None, None, None),
    "2d_bias": ((5, 7), (7, 3), (1, 3), None, None),
    "a_transposed": ((6, 9), (9, 4), None, "ba", None),
    "b_transposed": ((6, 9), (9, 4), (6, 4), None, "ba"),
    "both_transposed_dst_transposed": ((3, 8), (8, 5), None, "ba", "ba"),
    "batched": ((4, 5, 6), (4, 6, 7), (4, 1, 7), None, None),
    "broadcast_weights": ((3, 5, 6), (1, 6, 2), (1, 1, 2), None, None),
    "broadcast_src": ((1, 5, 6), (3, 6, 2), None, None, None),
    "4d_mixed_broadcast": ((2, 1, 4, 3), (1, 3, 3, 5), (2, 3, 1, 5), None, None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_reference(engine, stream, name):
    a_shape, b_shape, bias_shape, a_tag, b_tag = CASES[name]
    dst_tag = None
    if name == "both_transposed_dst_transposed":
        a_tag, b_tag, dst_tag = "ba", "ba", "ba"
    rng = np.random.default_rng(len(name))
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    bias = None if bias_shape is None else rng.standard_normal(bias_shape).astype(np.float32)
    got = _run(engine, stream, a, b, bias, a_tag, b_tag, dst_tag)
    want = ref_matmul(a, b, bias)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()))


def test_matches_onnx_reference_evaluator(engine, stream):
    """MatMul as ONNX's own reference evaluator computes it (numpy broadcasting rules)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(7)
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = rng.standard_normal((1, 3, 5, 6)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["Y"])], "mm",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, a.shape),
         helper.make_tensor_value_info("B", TensorProto.FLOAT, b.shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (2, 3, 4, 6))])
    model = helper.make_model(graph)
    onnx.checker.check_model(model)
    (want,) = ReferenceEvaluator(model).run(None, {"A": a, "B": b})
    got = _run(engine, stream, a, b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_any_resolves_to_row_major(cpu_engine):
    md = dnnl.memory.desc([2, 3, 4], dt.f32, tag.any)
    pd = dnnl.matmul.primitive_desc(cpu_engine, dnnl.memory.desc([2, 3, 5], dt.f32, tag.abc),
                                    dnnl.memory.desc([2, 5, 4], dt.f32, tag.abc), md)
    assert pd.dst_desc() == dnnl.memory.desc([2, 3, 4], dt.f32, tag.abc)
    assert pd.weights_desc() == dnnl.memory.desc([2, 5, 4], dt.f32, tag.abc)
    assert pd.query_md(dnnl.query.exec_arg_md, dnnl.ARG_BIAS).is_zero()


@pytest.mark.parametrize("dims", [([6, 9], [9, 20], [6, 20]), ([1, 5, 7], [1, 7, 33], [1, 5, 33])])
def test_any_weights_take_the_layout_the_gemm_reads(engine, stream, dims):
    """Weights ``any`` of one product: the tuned GEMM's packed panels where it reads packed B
    (``Ba<w>b``: N padded to whole panels), else row-major; results as numpy's."""
    sd, wd, dd = dims
    rng = np.random.default_rng(4)
    a = rng.standard_normal(sd).astype(np.float32)
    b = rng.standard_normal(wd).astype(np.float32)
    plain = "abc"[:len(sd)]
    pd = dnnl.matmul.primitive_desc(engine, dnnl.memory.desc(sd, dt.f32, plain),
                                    dnnl.memory.desc(wd, dt.f32, tag.any),
                                    dnnl.memory.desc(dd, dt.f32, plain))
    name = pd.weights_desc().format_name()
    assert name == plain or re.fullmatch(r"(a?)([BC])([ab])\d+[bc]", name), name
    args = {dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine, a),
            dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), engine, b),
            dnnl.ARG_DST: dnnl.memory(pd.dst_desc(), engine)}
    dnnl.matmul(pd).execute(stream, args)
    stream.wait()
    want = np.matmul(a.astype(np.float64), b)
    got = args[dnnl.ARG_DST].to_numpy()
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("shapes,match", [
    (([2, 3], [4, 5], [2, 5]), "weights_desc has K = 4 rows, src K = 3"),
    (([2, 3], [3, 5], [2, 6]), r"dst_desc ends in \[2, 6\], expected \[M, N\] = \[2, 5\]"),
    (([2, 2, 3], [3, 3, 5], [2, 2, 5]), "weights_desc batch dimension 0 is 3"),
    (([2, 3], [3, 5, 1], [2, 5]), "weights_desc has 3 dimensions, dst 2"),
])
def test_shape_errors_name_the_argument(cpu_engine, shapes, match):
    s, w, d = (dnnl.memory.desc(x, dt.f32, "abc"[:len(x)]) for x in shapes)
    with pytest.raises(dnnl.invalid_arguments, match=match):
        dnnl.matmul.primitive_desc(cpu_engine, s, w, d)


def test_bias_and_type_errors(cpu_engine):
    s = dnnl.memory.desc([2, 3], dt.f32, tag.ab)
    w = dnnl.memory.desc([3, 5], dt.f32, tag.ab)
    d = dnnl.memory.desc([2, 5], dt.f32, tag.ab)
    with pytest.raises(dnnl.invalid_arguments, match=r"bias_desc dims \[2, 4\]"):
        dnnl.matmul.primitive_desc(cpu_engine, s, w, dnnl.memory.desc([2, 4], dt.f32, tag.ab), d)
    with pytest.raises(dnnl.unimplemented, match="src data type s8"):
        dnnl.matmul.primitive_desc(cpu_engine, dnnl.memory.desc([2, 3], dt.s8, tag.ab), w, d)
    with pytest.raises(dnnl.invalid_arguments, match="matmul.primitive_desc"):
        dnnl.matmul.primitive_desc(cpu_engine, s, w)


@pytest.mark.parametrize("dts,dims", [
    (("bf16", "bf16", "bf16", "bf16"), ([7, 33], [33, 9], [7, 9])),
    (("f16", "f16", "f32", "f32"), ([2, 5, 16], [1, 16, 6], [2, 5, 6])),
    (("bf16", "f32", "f16", "bf16"), ([4, 3, 8], [4, 8, 5], [4, 3, 5])),
])
def test_low_precision_data_accumulates_in_f32(engine, stream, dts, dims):
    """bf16/f16 operands (any mix with f32), a sum and a relu post-op: the product of the
    values as stored, accumulated in f32 and rounded once into dst. Tolerance: one rounding
    of dst (bf16 2^-8, f16 2^-11 relative to the output's magnitude) plus f32 accumulation."""
    sdt, wdt, ddt, bdt = (getattr(dt, d) for d in dts)
    sd, wd, dd = dims
    nd = len(dd)
    plain = "abcd"[:nd]
    rng = np.random.default_rng(6)
    MD = dnnl.memory.desc

    def mem(md, a):
        return dnnl.memory(md, engine, a.astype(np.float32))

    po = dnnl.post_ops()
    po.append_sum(0.5)
    po.append_eltwise(dnnl.algorithm.eltwise_relu, 0.0, 0.0)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(po)
    bdims = [1] * (nd - 1) + [dd[-1]]
    pd = dnnl.matmul.primitive_desc(engine, MD(sd, sdt, plain), MD(wd, wdt, "any"),
                                    MD(bdims, bdt, plain), MD(dd, ddt, plain), attr)
    args = {dnnl.ARG_SRC: mem(pd.src_desc(), rng.standard_normal(sd)),
            dnnl.ARG_WEIGHTS: mem(pd.weights_desc(), rng.standard_normal(wd)),
            dnnl.ARG_BIAS: mem(MD(bdims, bdt, plain), rng.standard_normal(bdims)),
            dnnl.ARG_DST: mem(pd.dst_desc(), rng.standard_normal(dd))}
    stored = {k: m.to_numpy().astype(np.float64) for k, m in args.items()}
    dnnl.matmul(pd).execute(stream, args)
    stream.wait()
    want = np.maximum(np.matmul(stored[dnnl.ARG_SRC], stored[dnnl.ARG_WEIGHTS])
                      + stored[dnnl.ARG_BIAS] + 0.5 * stored[dnnl.ARG_DST], 0.0)
    tol = {dt.bf16: 2.0 ** -8, dt.f16: 2.0 ** -11, dt.f32: 0.0}[ddt] + 1e-5
    got = args[dnnl.ARG_DST].to_numpy()
    assert np.abs(got - want).max() <= tol * np.abs(want).max()
