"""oneDNN 3.7's ternary ``binary_select`` (``dst = src2 ? src0 : src1``, src2 an s8 condition
of src0's dims) on every device: against the float64 numpy reference and ONNX's reference
evaluator (``Where``); broadcast of src1, and of src0 with its condition; plain, channels-last
and blocked layouts; bf16/f16 data; scales and post-ops; run-time sizes; the ``src_desc(2)``
query and call forms; bad descs and arguments raising with outputs untouched."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.binary import binary as ref_binary
from pydnnl.reference.post_ops import apply_post_ops

A = dnnl.algorithm
SEL = A.binary_select
dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
MD = dnnl.memory.desc


def _data(seed, dims):
    """Integers and halves in [-4, 4]: exact in f32, bf16 and f16 (a select copies values)."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-8, 9, dims) * 0.5).astype(np.float32)


def _cond(seed, dims):
    """s8 conditions: zeros and non-zeros of both signs (any non-zero selects src0)."""
    c = np.random.default_rng(seed).integers(-2, 3, dims).astype(np.int8)
    c.flat[:3] = [0, -128, 127][:c.size]
    return c


def _select(engine, stream, x0, x1, c, t0, t1, t2, td=tag.any, dts=(dt.f32,) * 3,
            attr=None, extra=None, prior=None):
    dims = [max(a, b) for a, b in zip(x0.shape, x1.shape)]
    descs = [MD(list(x0.shape), dts[0], t0), MD(list(x1.shape), dts[1], t1),
             MD(list(c.shape), dt.s8, t2), MD(dims, dts[2], td)]
    pd = (dnnl.binary.primitive_desc(engine, SEL, *descs) if attr is None
          else dnnl.binary.primitive_desc(engine, SEL, *descs, attr))
    args = {dnnl.ARG_SRC_0: dnnl.memory(pd.src_desc(0), engine, x0),
            dnnl.ARG_SRC_1: dnnl.memory(pd.src_desc(1), engine, x1),
            dnnl.ARG_SRC_2: dnnl.memory(pd.src_desc(2), engine, c),
            dnnl.ARG_DST: dnnl.memory(pd.dst_desc(), engine, prior)}
    args.update(extra or {})
    dnnl.binary(pd).execute(stream, args)
    stream.wait()
    return args[dnnl.ARG_DST].to_numpy(), pd


def _onnx_where(c, x, y):
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    out = list(np.broadcast_shapes(c.shape, x.shape, y.shape))
    graph = helper.make_graph(
        [helper.make_node("Where", ["c", "x", "y"], ["z"])], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, list(c.shape)),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y.shape))],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    onnx.checker.check_model(model)
    return ReferenceEvaluator(model).run(None, {"c": c != 0, "x": x, "y": y})[0]


CASES = {  # src0 (and src2) dims, src1 dims, tags (src0, src1, src2, dst), impl
    "flat": ([2, 3, 4, 5], [2, 3, 4, 5], ("abcd",) * 3 + (tag.any,), "flat"),
    "src1-per-channel-nhwc": ([2, 16, 3, 5], [1, 16, 1, 1], ("acdb", "abcd", "acdb", "acdb"),
                              "strided"),
    "src0-src2-broadcast": ([2, 1, 4, 5], [2, 3, 4, 5], ("abcd", "abcd", "abcd", tag.any),
                            "strided"),
    "blocked-mixed": ([2, 20, 3, 3], [2, 20, 3, 3], ("aBcd16b", "acdb", "abcd", "aBcd8b"),
                      "strided"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_reference_and_onnx(engine, stream, case):
    d0, d1, (t0, t1, t2, td), impl = CASES[case]
    x0, x1, c = _data(1, d0), _data(2, d1), _cond(3, d0)
    y, pd = _select(engine, stream, x0, x1, c, t0, t1, t2, td)
    want = ref_binary(SEL, x0, x1, src2=c)
    assert y.shape == want.shape
    np.testing.assert_array_equal(y, want)  # a copy of one source: exact
    np.testing.assert_array_equal(y, _onnx_where(c, x0, x1))
    assert pd.impl_info_str() == f"ocl:binary:{impl}"
    if td == tag.any:  # dst follows src0's layout
        assert pd.dst_desc() == MD(list(want.shape), dt.f32, t0)


def test_bf16_f16_sources_and_dst(engine, stream):
    """bf16 src0, f16 src1, bf16 dst; src1 per channel: the values are exact in every type,
    so the result is exact too."""
    d0, d1 = [2, 16, 3, 5], [1, 16, 1, 1]
    x0, x1, c = _data(4, d0), _data(5, d1), _cond(6, d0)
    y, pd = _select(engine, stream, x0, x1, c, "abcd", "abcd", "abcd",
                    dts=(dt.bf16, dt.f16, dt.bf16))
    assert pd.dst_desc().data_type == dt.bf16
    np.testing.assert_array_equal(y, ref_binary(SEL, x0, x1, src2=c))


def test_scales_and_post_ops(engine, stream):
    """oneDNN's select scales the sources before choosing, then runs the post-op chain."""
    dims = [2, 3, 4, 5]
    x0, x1, c = _data(7, dims), _data(8, [1, 3, 1, 1]), _cond(9, dims)
    po_src, prior = _data(10, [1, 1, 4, 5]), _data(11, dims)
    ops = dnnl.post_ops()
    ops.append_sum(0.5)
    ops.append_eltwise(A.eltwise_relu, 0.25, 0.0)
    ops.append_binary(A.binary_mul, MD([1, 1, 4, 5], dt.f32, "abcd"))
    attr = dnnl.primitive_attr()
    attr.set_post_ops(ops)
    attr.set_scales_mask(dnnl.ARG_SRC_0, 0)
    attr.set_scales_mask(dnnl.ARG_SRC_1, 0)
    one = MD([1], dt.f32, "a")
    extra = {dnnl.ARG_ATTR_SCALES | dnnl.ARG_SRC_0: dnnl.memory(one, engine, np.float32([0.5])),
             dnnl.ARG_ATTR_SCALES | dnnl.ARG_SRC_1: dnnl.memory(one, engine, np.float32([-3])),
             dnnl.ARG_ATTR_MULTIPLE_POST_OP(2) | dnnl.ARG_SRC_1:
                 dnnl.memory(MD([1, 1, 4, 5], dt.f32, "abcd"), engine, po_src)}
    y, pd = _select(engine, stream, x0, x1, c, "acdb", "abcd", "acdb", "acdb", attr=attr,
                    extra=extra, prior=prior)
    want = apply_post_ops(ref_binary(SEL, x0, x1, 0.5, -3.0, src2=c), ops, prior=prior,
                          binary_srcs={2: po_src})
    # halves, quarters and their products: every step is exact in f32
    np.testing.assert_array_equal(y, want)
    assert "attr-post-ops" in pd._info and "attr-scales:src_0+src_1" in pd._info


def test_inplace_over_src0(engine, stream):
    dims = [3, 4, 5]
    md = MD(dims, dt.f32, "abc")
    x0, x1, c = _data(12, dims), _data(13, [3, 1, 5]), _cond(14, dims)
    pd = dnnl.binary.primitive_desc(engine, SEL, md, MD([3, 1, 5], dt.f32, "abc"),
                                    MD(dims, dt.s8, "abc"), md)
    a = dnnl.memory(md, engine, x0)
    dnnl.binary(pd).execute(stream, {
        dnnl.ARG_SRC_0: a, dnnl.ARG_SRC_1: dnnl.memory(pd.src_desc(1), engine, x1),
        dnnl.ARG_SRC_2: dnnl.memory(pd.src_desc(2), engine, c), dnnl.ARG_DST: a})
    stream.wait()
    np.testing.assert_array_equal(a.to_numpy(), ref_binary(SEL, x0, x1, src2=c))


def test_new_minibatch_needs_no_new_kernel(engine, stream, requested):
    """Sizes stay kernel arguments for select (the condition's strides too)."""
    shapes = [([2, 16, 17, 17], [1, 16, 1, 1]), ([3, 16, 17, 17], [1, 16, 1, 1])]
    first = None
    for seed, (d0, d1) in enumerate(shapes):
        x0, x1, c = _data(seed, d0), _data(seed + 1, d1), _cond(seed + 2, d0)
        y, _ = _select(engine, stream, x0, x1, c, "abcd", "abcd", "abcd", "abcd")
        np.testing.assert_array_equal(y, ref_binary(SEL, x0, x1, src2=c))
        if first is None:
            first = set(requested)
            assert first
            requested.clear()
    assert set(requested) <= first, sorted(set(requested) - first)


# ---- queries, call forms, verbose ----------------------------------------------------------

def test_queries_and_call_forms(engine, monkeypatch, capsys):
    m0, m1 = MD([2, 3, 4], dt.f32, "acb"), MD([1, 3, 1], dt.f32, "abc")
    m2 = MD([2, 3, 4], dt.s8, tag.any)
    pd = dnnl.binary.primitive_desc(engine=engine, algorithm=SEL, src0_desc=m0, src1_desc=m1,
                                    src2_desc=m2, dst_desc=MD([2, 3, 4], dt.f32, tag.any))
    assert pd.get_algorithm() == SEL
    assert pd.src_desc(2) == MD([2, 3, 4], dt.s8, "acb")  # any follows src0's layout
    assert pd.query_md(dnnl.query.src_md, 2) == pd.src_desc(2)
    assert pd.query_md(dnnl.query.exec_arg_md, dnnl.ARG_SRC_2) == pd.src_desc(2)
    assert pd.src_desc(0) == m0 and pd.src_desc(1) == m1 and pd.dst_desc() == m0
    # positional with attr, and oneDNN's keyword spellings
    pd2 = dnnl.binary.primitive_desc(engine, SEL, m0, m1, pd.src_desc(2), m0,
                                     dnnl.primitive_attr())
    assert pd2.src_desc(2) == pd.src_desc(2)
    pd3 = dnnl.binary.primitive_desc(aengine=engine, aalgorithm=SEL, src0=m0, src1=m1,
                                     src2=pd.src_desc(2), dst=m0)
    assert pd3.src_desc(2) == pd.src_desc(2)
    # oneDNN checks a src2 given to another algorithm, then ignores it
    add = dnnl.binary.primitive_desc(engine, A.binary_add, m0, m1, pd.src_desc(2), m0)
    assert add.src_desc(2) == MD() and dnnl.ARG_SRC_2 not in add.arg_specs()
    monkeypatch.setenv("PYDNNL_VERBOSE", "1")
    dnnl.binary(pd)
    (line,) = [ln for ln in capsys.readouterr().out.splitlines()
               if ln.startswith("pydnnl_verbose,create,binary")]
    assert ("src_0:f32:acb:2x3x4 src_1:f32:abc:1x3x1 src_2:s8:acb:2x3x4 dst:f32:acb:2x3x4,"
            "alg:binary_select 2x3x4:1x3x1:2x3x4:2x3x4," in line), line


# ---- errors: the argument, what was expected, what came; nothing written -----------------

D0 = [2, 3, 4, 5]
BAD = {
    "select-without-src2": (dict(form=5), r"binary_select needs src2_desc.*got None"),
    "select-src2-none": (dict(m2=None), r"binary_select needs src2_desc.*\[2, 3, 4, 5\].*None"),
    "src2-f32": (dict(dt2=dt.f32), r"src2_desc data type must be s8.*got f32"),
    "src2-u8": (dict(dt2=dt.u8), r"src2_desc data type must be s8.*got u8"),
    "src2-broadcast": (dict(d2=[1, 3, 4, 5]),
                       r"src2_desc dims must be src0_desc's \[2, 3, 4, 5\].*got \[1, 3, 4, 5\]"),
    "src2-rank": (dict(d2=[2, 3, 20]), r"src2_desc dims must be.*got \[2, 3, 20\]"),
    "add-with-bad-src2": (dict(alg=A.binary_add, dt2=dt.f32),
                          r"src2_desc data type must be s8.*got f32"),
    "src2-not-a-desc": (dict(m2=[2, 3, 4, 5]), r"unexpected positional argument \[2, 3, 4, 5\]"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_descs(engine, case):
    bad, match = BAD[case]
    m0, m1 = MD(D0, dt.f32, "abcd"), MD([1, 3, 1, 1], dt.f32, "abcd")
    d2 = bad.get("d2", D0)
    m2 = bad.get("m2", MD(d2, bad.get("dt2", dt.s8), "abcdefg"[:len(d2)]))
    alg = bad.get("alg", SEL)
    with pytest.raises(dnnl.invalid_arguments, match=match):
        if bad.get("form") == 5:
            dnnl.binary.primitive_desc(engine, alg, m0, m1, m0)
        else:
            dnnl.binary.primitive_desc(engine, alg, m0, m1, m2, m0)


def test_bad_arguments_leave_outputs_untouched(engine, stream):
    md, m2 = MD(D0, dt.f32, "abcd"), MD(D0, dt.s8, "abcd")
    pd = dnnl.binary.primitive_desc(engine, SEL, md, md, m2, md)
    prim = dnnl.binary(pd)
    a, b = dnnl.memory(md, engine, _data(15, D0)), dnnl.memory(md, engine, _data(16, D0))
    sentinel = np.full(D0, -7.0, np.float32)
    out = dnnl.memory(md, engine, sentinel)
    good = {dnnl.ARG_SRC_0: a, dnnl.ARG_SRC_1: b, dnnl.ARG_DST: out}
    with pytest.raises(dnnl.invalid_arguments, match="missing argument ARG_SRC_2"):
        prim.execute(stream, good)
    for wrong in (MD(D0, dt.s8, "acdb"), MD(D0, dt.u8, "abcd")):
        with pytest.raises(dnnl.invalid_arguments, match="ARG_SRC_2 has desc.*expects"):
            prim.execute(stream, {**good, dnnl.ARG_SRC_2: dnnl.memory(wrong, engine)})
    # the condition read from dst's own buffer (an s8 view of it) is no in-place use
    view = dnnl.memory(m2, engine, out.buffer)
    with pytest.raises(dnnl.invalid_arguments, match="ARG_SRC_2 .*and ARG_DST share one buffer"):
        prim.execute(stream, {**good, dnnl.ARG_SRC_2: view})
    add = dnnl.binary(dnnl.binary.primitive_desc(engine, A.binary_add, md, md, md))
    with pytest.raises(dnnl.invalid_arguments, match="unexpected argument ARG_SRC_2"):
        add.execute(stream, {**good, dnnl.ARG_SRC_2: dnnl.memory(m2, engine)})
    stream.wait()
    np.testing.assert_array_equal(out.to_numpy(), sentinel)


def test_benchdnn_select(capsys, benchdnn_engine):
    """``--alg=SELECT``: the s8 condition takes src0's dims and tag, as in oneDNN's benchdnn."""
    from pydnnl.benchdnn.__main__ import main

    rc = main([benchdnn_engine, "--binary", "--mode=C", "--alg=SELECT", "--stag=axb:abx",
               "--inplace=false", "--attr-scales=src1:common:2", "2x16x3x3:1x16x1x1", "--stag=abx",
               "--inplace=true", "1x8x1x5:2x8x3x5"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("check,passed,binary,--alg=SELECT") == 2 and "FAILED" not in out, out
