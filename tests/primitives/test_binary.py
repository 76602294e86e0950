"""The binary primitive on every device: each of oneDNN's twelve algorithms against the
float64 numpy reference and ONNX's reference evaluator (Add, Mul, Max, Min, Div, Sub,
GreaterOrEqual, Greater, LessOrEqual, Less, Equal, Not(Equal)); broadcast of src1 and of src0;
plain, channels-last, transposed, strided, blocked (with padding) and ``any`` layouts; in-place
use; scales and post-ops; queries, call forms and errors (outputs untouched after a refused
call)."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.binary import binary as ref_binary
from pydnnl.reference.post_ops import apply_post_ops

A = dnnl.algorithm
dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
ALGS = [A.binary_add, A.binary_mul, A.binary_max, A.binary_min, A.binary_div, A.binary_sub,
        A.binary_ge, A.binary_gt, A.binary_le, A.binary_lt, A.binary_eq, A.binary_ne]
COMPARE = {A.binary_ge, A.binary_gt, A.binary_le, A.binary_lt, A.binary_eq, A.binary_ne}
ONNX_OPS = {A.binary_add: "Add", A.binary_mul: "Mul", A.binary_max: "Max", A.binary_min: "Min",
            A.binary_div: "Div", A.binary_sub: "Sub", A.binary_ge: "GreaterOrEqual",
            A.binary_gt: "Greater", A.binary_le: "LessOrEqual", A.binary_lt: "Less",
            A.binary_eq: "Equal", A.binary_ne: "Equal"}


def _data(seed, dims, alg=None):
    """Small integers and halves (many exact ties for the comparisons), never 0 for div."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 5, dims).astype(np.float64) * 0.5
    if alg == A.binary_div:
        x = np.where(x == 0, 1.5, x)
    if alg is None or alg not in COMPARE:
        x = x + rng.uniform(-0.2, 0.2, dims)
        if alg == A.binary_div:
            x = np.where(np.abs(x) < 0.25, 0.75, x)
    return x.astype(np.float32)


def _close(got, want, scale, rtol=2e-6):
    got = np.asarray(got, np.float64)
    err = np.abs(got - want)
    bad = err > rtol * (np.abs(want) + scale) + 1e-7
    assert not bad.any(), (f"{bad.sum()} of {bad.size} differ; got {got[bad][:4]}, want "
                           f"{want[bad][:4]}")


def _md(dims, t):
    return dnnl.memory.desc(dims, dt.f32, t)


def run(engine, stream, alg, x0, x1, t0="abcd", t1="abcd", td=tag.any, attr=None, extra=None,
        inplace=False, prior=None):
    m0 = _md(list(x0.shape), t0) if not isinstance(t0, dnnl.memory.desc) else t0
    m1 = _md(list(x1.shape), t1) if not isinstance(t1, dnnl.memory.desc) else t1
    dims = [max(a, b) for a, b in zip(x0.shape, x1.shape)]
    md = _md(dims, td) if not isinstance(td, dnnl.memory.desc) else td
    pd = (dnnl.binary.primitive_desc(engine, alg, m0, m1, md) if attr is None
          else dnnl.binary.primitive_desc(engine, alg, m0, m1, md, attr))
    a = dnnl.memory(pd.src_desc(0), engine, x0)
    b = dnnl.memory(pd.src_desc(1), engine, x1)
    c = a if inplace else dnnl.memory(pd.dst_desc(), engine,
                                      prior if prior is not None else None)
    args = {dnnl.ARG_SRC_0: a, dnnl.ARG_SRC_1: b, dnnl.ARG_DST: c}
    args.update(extra or {})
    dnnl.binary(pd).execute(stream, args)
    stream.wait()
    return c.to_numpy(), pd


# ---- every algorithm, every broadcast pattern ------------------------------------------------

SHAPES = [  # (src0 dims, src1 dims)
    ([2, 3, 4, 5], [2, 3, 4, 5]),     # no broadcast: flat kernel
    ([2, 3, 4, 5], [1, 3, 1, 1]),     # per channel
    ([2, 3, 4, 5], [1, 1, 1, 1]),     # scalar
    ([2, 3, 2, 300], [2, 1, 2, 300]),  # broadcast in the middle, rows of 300
    ([1, 3, 1, 5], [2, 3, 4, 5]),     # src0 broadcast (oneDNN v3 allows it)
    ([2, 1, 4, 1], [1, 3, 1, 5]),     # both broadcast: dst 2x3x4x5
]


@pytest.mark.sampled(every=5)
@pytest.mark.parametrize("alg", ALGS, ids=[a.name[7:] for a in ALGS])
@pytest.mark.parametrize("shape", range(len(SHAPES)))
def test_matches_reference(engine, stream, alg, shape):
    d0, d1 = SHAPES[shape]
    x0, x1 = _data(shape, d0, alg), _data(50 + shape, d1, alg)
    y, pd = run(engine, stream, alg, x0, x1)
    want = ref_binary(alg, x0, x1)
    assert y.shape == want.shape
    _close(y, want, np.abs(x0) + np.abs(x1))
    assert pd.impl_info_str() == ("ocl:binary:flat" if shape == 0 else "ocl:binary:strided")
    if alg in COMPARE:
        assert set(np.unique(y)) <= {0.0, 1.0}


def _onnx(op, a, b, negate=False):
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    out_shape = list(np.broadcast_shapes(a.shape, b.shape))
    nodes = [helper.make_node(op, ["a", "b"], ["r"])]
    last = "r"
    if op in ("GreaterOrEqual", "Greater", "LessOrEqual", "Less", "Equal"):
        if negate:
            nodes.append(helper.make_node("Not", [last], ["n"]))
            last = "n"
        nodes.append(helper.make_node("Cast", [last], ["y"], to=TensorProto.FLOAT))
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a.shape)),
                     helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    return ReferenceEvaluator(model).run(None, {"a": a, "b": b})[0]


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("alg", ALGS, ids=[a.name[7:] for a in ALGS])
def test_matches_onnx(engine, stream, alg):
    x0, x1 = _data(7, [2, 4, 3, 6], alg), _data(8, [1, 4, 3, 1], alg)
    y, _ = run(engine, stream, alg, x0, x1, "acdb", "abcd")
    want = _onnx(ONNX_OPS[alg], x0, x1, negate=alg == A.binary_ne)
    # float32 both ways: the same rounding
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=0)


# ---- layouts ---------------------------------------------------------------------------------

LAYOUTS = {  # (src0, src1, dst, src1 dims)
    "nhwc": ("acdb", "acdb", tag.any, [2, 20, 3, 5]),
    "transposed": ("abdc", "abcd", "abcd", [2, 20, 3, 5]),
    "blocked-padded": ("aBcd16b", "abcd", tag.any, [1, 20, 1, 1]),
    "blocked-mixed": ("aBcd8b", "aBcd16b", "acdb", [2, 20, 3, 5]),
    "blocked-same": ("aBcd16b", "aBcd16b", "aBcd16b", [2, 20, 3, 5]),
    "nhwc-scalar": ("acdb", "abcd", "acdb", [1, 1, 1, 1]),
}


@pytest.mark.parametrize("case", list(LAYOUTS))
def test_layouts(engine, stream, case):
    t0, t1, td, d1 = LAYOUTS[case]
    x0, x1 = _data(1, [2, 20, 3, 5]), _data(2, d1)
    y, pd = run(engine, stream, A.binary_sub, x0, x1, t0, t1, td)
    _close(y, ref_binary(A.binary_sub, x0, x1), np.abs(x0) + np.abs(x1))
    if td == tag.any:  # dst follows src0's layout
        assert pd.dst_desc() == _md([2, 20, 3, 5], t0)


def test_blocked_padding_untouched(engine, stream):
    """C = 20 in nChw16c: the padded channels 20..31 keep what they held."""
    dims = [2, 20, 3, 5]
    md = _md(dims, "aBcd16b")
    x0, x1 = _data(3, dims), _data(4, [1, 20, 1, 1])
    pd = dnnl.binary.primitive_desc(engine, A.binary_add, md, _md([1, 20, 1, 1], "abcd"), md)
    a, b = dnnl.memory(md, engine, x0), dnnl.memory(pd.src_desc(1), engine, x1)
    n = md.nelems_physical()
    raw = dnnl.memory(_md([n], "a"), engine, np.full(n, 9.0, np.float32))
    c = dnnl.memory(md, engine, raw.buffer)
    dnnl.binary(pd).execute(stream, {dnnl.ARG_SRC_0: a, dnnl.ARG_SRC_1: b, dnnl.ARG_DST: c})
    stream.wait()
    out = c.read_raw()
    used = np.zeros(n, bool)
    used[md.element_offsets().ravel()] = True
    assert (out[~used] == 9.0).all()
    _close(md.unpack(out), ref_binary(A.binary_add, x0, x1), np.abs(x0) + 1)


def test_strided_and_offset_views(engine, stream):
    """Non-dense strides and a sub-memory view (offset0) on every tensor."""
    dims = [3, 4, 5]
    big = _md([3, 6, 7], "abc")
    m0 = big.submemory_desc(dims, [0, 1, 2])
    m1 = dnnl.memory.desc([3, 1, 5], dt.f32, [50, 40, 2])
    md = dnnl.memory.desc(dims, dt.f32, [1, 3 * 2, 3 * 4 * 2])
    x0, x1 = _data(5, dims), _data(6, [3, 1, 5])
    pd = dnnl.binary.primitive_desc(engine, A.binary_mul, m0, m1, md)
    full = np.zeros([3, 6, 7], np.float32)
    full[:, 1:5, 2:7] = x0
    whole = dnnl.memory(big, engine, full)
    a = dnnl.memory(m0, engine, whole.buffer)
    b, c = dnnl.memory(m1, engine, x1), dnnl.memory(md, engine)
    dnnl.binary(pd).execute(stream, {dnnl.ARG_SRC_0: a, dnnl.ARG_SRC_1: b, dnnl.ARG_DST: c})
    stream.wait()
    _close(c.to_numpy(), ref_binary(A.binary_mul, x0, x1), np.abs(x0 * x1))
    assert pd.impl_info_str() == "ocl:binary:strided"


@pytest.mark.parametrize("t", ["abcd", "aBcd16b"])
def test_inplace(engine, stream, t):
    x0, x1 = _data(9, [2, 20, 3, 5]), _data(10, [1, 20, 1, 5])
    y, pd = run(engine, stream, A.binary_max, x0, x1, t, "abcd", t, inplace=True)
    _close(y, ref_binary(A.binary_max, x0, x1), 0)


def test_src1_any_follows_src0(engine, stream):
    x0, x1 = _data(11, [2, 3, 4, 5]), _data(12, [2, 3, 4, 5])
    m1 = _md([2, 3, 4, 5], tag.any)
    pd = dnnl.binary.primitive_desc(engine, A.binary_add, _md([2, 3, 4, 5], "acdb"), m1,
                                    _md([2, 3, 4, 5], tag.any))
    assert pd.src_desc(1) == _md([2, 3, 4, 5], "acdb")
    y, _ = run(engine, stream, A.binary_add, x0, x1, "acdb", tag.any)
    _close(y, x0.astype(np.float64) + x1, np.abs(x0) + np.abs(x1))


# ---- attributes ------------------------------------------------------------------------------

def test_scales(engine, stream):
    x0, x1 = _data(13, [2, 3, 4, 5]), _data(14, [1, 3, 1, 1])
    attr = dnnl.primitive_attr()
    attr.set_scales_mask(dnnl.ARG_SRC_0, 0)
    attr.set_scales_mask(dnnl.ARG_SRC_1, 0)
    one = _md([1], "a")
    extra = {dnnl.ARG_ATTR_SCALES | dnnl.ARG_SRC_0: dnnl.memory(one, engine,
                                                                np.float32([0.5])),
             dnnl.ARG_ATTR_SCALES | dnnl.ARG_SRC_1: dnnl.memory(one, engine, np.float32([-3]))}
    y, pd = run(engine, stream, A.binary_add, x0, x1, attr=attr, extra=extra)
    _close(y, ref_binary(A.binary_add, x0, x1, 0.5, -3.0), np.abs(x0) + 3 * np.abs(x1))


def test_post_ops(engine, stream):
    dims = [2, 3, 4, 5]
    x0, x1 = _data(15, dims), _data(16, [1, 3, 1, 1])
    po_src = _data(17, [1, 1, 4, 5])
    prior = _data(18, dims)
    ops = dnnl.post_ops()
    ops.append_eltwise(A.eltwise_relu, 0.1, 0.0)
    ops.append_sum(0.5)
    ops.append_binary(A.binary_mul, _md([1, 1, 4, 5], "abcd"))
    attr = dnnl.primitive_attr()
    attr.set_post_ops(ops)
    extra = {dnnl.ARG_ATTR_MULTIPLE_POST_OP(2) | dnnl.ARG_SRC_1:
             dnnl.memory(_md([1, 1, 4, 5], "abcd"), engine, po_src)}
    y, pd = run(engine, stream, A.binary_div, x0, x1, "acdb", td="acdb", attr=attr,
                extra=extra, prior=prior)
    want = apply_post_ops(ref_binary(A.binary_div, x0, x1), ops, prior=prior,
                          binary_srcs={2: po_src})
    _close(y, want, np.abs(x0 / x1) * np.abs(po_src) + np.abs(prior), rtol=1e-5)
    assert "attr-post-ops" in pd._info


# ---- queries, call forms, errors -------------------------------------------------------------

def test_queries_and_keywords(engine):
    m0, m1 = _md([2, 3], "ab"), _md([1, 3], "ab")
    pd = dnnl.binary.primitive_desc(engine=engine, algorithm=A.binary_min, src0_desc=m0,
                                    src1_desc=m1, dst_desc=_md([2, 3], tag.any))
    assert pd.get_algorithm() == A.binary_min
    assert pd.src_desc(0) == m0 and pd.src_desc(1) == m1 and pd.dst_desc() == m0
    assert pd.query_md(dnnl.query.exec_arg_md, dnnl.ARG_SRC_1) == m1
    assert isinstance(dnnl.binary(pd), dnnl.binary)


@pytest.mark.parametrize("bad, err, match", [
    (dict(alg=A.eltwise_relu), dnnl.invalid_arguments, "algorithm"),
    (dict(d1=[2, 2, 4, 5]), dnnl.invalid_arguments, "dimension 1"),
    (dict(d1=[3, 4, 5]), dnnl.invalid_arguments, "dims"),
    (dict(dd=[2, 3, 4, 6]), dnnl.invalid_arguments, "dimension 3"),
    (dict(dd=[1, 3, 4, 5]), dnnl.invalid_arguments, "dimension 0"),
    (dict(t0=tag.any), dnnl.invalid_arguments, "src0_desc"),
    (dict(dt1=dt.s8), dnnl.unimplemented, "s8"),
    (dict(scale_mask=2), dnnl.unimplemented, "mask"),
])
def test_bad_descs(engine, bad, err, match):
    d0 = [2, 3, 4, 5]
    m0 = dnnl.memory.desc(d0, dt.f32, bad.get("t0", "abcd"))
    m1 = dnnl.memory.desc(bad.get("d1", [1, 3, 1, 1]), bad.get("dt1", dt.f32),
                          "abcdefg"[:len(bad.get("d1", d0))])
    md = _md(bad.get("dd", d0), "abcd")
    attr = dnnl.primitive_attr()
    if "scale_mask" in bad:
        attr.set_scales_mask(dnnl.ARG_SRC_1, bad["scale_mask"])
    with pytest.raises(err, match=match):
        dnnl.binary.primitive_desc(engine, bad.get("alg", A.binary_add), m0, m1, md, attr)


def test_bad_execute_leaves_outputs_untouched(engine, stream):
    dims = [2, 3, 4, 5]
    md = _md(dims, "abcd")
    pd = dnnl.binary.primitive_desc(engine, A.binary_add, md, _md([1, 3, 1, 1], "abcd"), md)
    prim = dnnl.binary(pd)
    x0 = _data(19, dims)
    a = dnnl.memory(md, engine, x0)
    b = dnnl.memory(pd.src_desc(1), engine, _data(20, [1, 3, 1, 1]))
    sentinel = np.full(dims, -7.0, np.float32)
    c = dnnl.memory(md, engine, sentinel)
    wrong = dnnl.memory(_md(dims, "acdb"), engine, x0)
    with pytest.raises(dnnl.invalid_arguments, match="desc"):
        prim.execute(stream, {dnnl.ARG_SRC_0: wrong, dnnl.ARG_SRC_1: b, dnnl.ARG_DST: c})
    with pytest.raises(dnnl.invalid_arguments, match="missing"):
        prim.execute(stream, {dnnl.ARG_SRC_0: a, dnnl.ARG_DST: c})
    stream.wait()
    np.testing.assert_array_equal(c.to_numpy(), sentinel)
    # one buffer seen as src0 and dst through different descs is no in-place use
    pd2 = dnnl.binary.primitive_desc(engine, A.binary_add, md, pd.src_desc(1),
                                     _md(dims, "acdb"))
    same = dnnl.memory(_md(dims, "acdb"), engine, a.buffer)
    with pytest.raises(dnnl.invalid_arguments, match="in-place"):
        dnnl.binary(pd2).execute(stream, {dnnl.ARG_SRC_0: a, dnnl.ARG_SRC_1: b,
                                          dnnl.ARG_DST: same})
    stream.wait()
    np.testing.assert_array_equal(a.to_numpy(), x0)


# ---- bf16 and f16 ----------------------------------------------------------------------------
# Inputs are rounded to their type first (the values the kernel reads); the float64 reference
# of those values, rounded once to dst's type, is within EPS (unit roundoff: bf16 2^-8, f16
# 2^-11, f32 2^-24) of it relatively, the f32 operation adds one more 2^-24. Tolerance:
# 2 * EPS[dst] * |ref| + 2^-24 * |ref|, plus f16's subnormal spacing 2^-24; comparisons exact.
EPS = {dt.bf16: 2.0 ** -8, dt.f16: 2.0 ** -11, dt.f32: 2.0 ** -24}
LOW = [  # (src0, src1, dst) types, src0 dims, src1 dims, src0 tag
    ((dt.bf16, dt.bf16, dt.bf16), [2, 3, 4, 5], [2, 3, 4, 5], "abcd"),    # flat
    ((dt.bf16, dt.f32, dt.bf16), [2, 32, 4, 5], [1, 32, 1, 1], "abcd"),   # rows, per channel
    ((dt.f16, dt.f16, dt.f16), [2, 32, 4, 5], [1, 32, 1, 1], "acdb"),     # short rows
    ((dt.f32, dt.f32, dt.bf16), [2, 3, 2, 300], [2, 1, 2, 300], "abcd"),  # long rows
    ((dt.f16, dt.bf16, dt.f32), [2, 20, 3, 3], [1, 20, 1, 1], "aBcd16b"),  # strided, padded
]
LOW_IDS = ["-".join(t.name for t in c[0]) + f"-{c[3]}" for c in LOW]


@pytest.mark.parametrize("alg", [A.binary_add, A.binary_mul, A.binary_div, A.binary_max,
                                 A.binary_ge], ids=["add", "mul", "div", "max", "ge"])
@pytest.mark.parametrize("case", range(len(LOW)), ids=LOW_IDS)
def test_bf16_f16(engine, stream, case, alg):
    (t0, t1, td), d0, d1, tg = LOW[case]
    x0, x1 = _data(case, d0, alg), _data(50 + case, d1, alg)
    m0 = dnnl.memory.desc(d0, t0, tg)
    m1 = dnnl.memory.desc(d1, t1, "abcd")
    pd = dnnl.binary.primitive_desc(engine, alg, m0, m1, dnnl.memory.desc(d0, td, tag.any))
    assert pd.dst_desc().data_type == td
    a, b = dnnl.memory(m0, engine, x0), dnnl.memory(m1, engine, x1)
    c = dnnl.memory(pd.dst_desc(), engine)
    dnnl.binary(pd).execute(stream, {dnnl.ARG_SRC_0: a, dnnl.ARG_SRC_1: b, dnnl.ARG_DST: c})
    stream.wait()
    want = ref_binary(alg, a.to_numpy().astype(np.float64), b.to_numpy().astype(np.float64))
    got = c.to_numpy().astype(np.float64)
    if alg in COMPARE:
        np.testing.assert_array_equal(got, want)
        return
    tol = (2 * EPS[td] + 2.0 ** -24) * np.abs(want) + (2.0 ** -24 if td == dt.f16 else 0.0)
    bad = np.abs(got - want) > tol
    assert not bad.any(), f"{bad.sum()} differ; got {got[bad][:4]}, want {want[bad][:4]}"


def test_bf16_post_ops_and_inplace(engine, stream):
    """bf16 in place (dst is src0) with a sum post-op reading dst's bf16 content and a relu."""
    d0, d1 = [2, 16, 3, 5], [1, 16, 1, 1]
    x0, x1 = _data(7, d0), _data(8, d1)
    m0 = dnnl.memory.desc(d0, dt.bf16, "abcd")
    ops = dnnl.post_ops()
    ops.append_sum(0.5)
    ops.append_eltwise(A.eltwise_relu, 0.0, 0.0)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(ops)
    pd = dnnl.binary.primitive_desc(engine, A.binary_add, m0, _md(d1, "abcd"), m0, attr)
    a, b = dnnl.memory(m0, engine, x0), dnnl.memory(pd.src_desc(1), engine, x1)
    xs = a.to_numpy().astype(np.float64)
    dnnl.binary(pd).execute(stream, {dnnl.ARG_SRC_0: a, dnnl.ARG_SRC_1: b, dnnl.ARG_DST: a})
    stream.wait()
    want = np.maximum(0.5 * xs + (xs + x1), 0)
    got = a.to_numpy().astype(np.float64)
    assert np.all(np.abs(got - want) <= (2 * EPS[dt.bf16] + 2.0 ** -22) * np.abs(want))
