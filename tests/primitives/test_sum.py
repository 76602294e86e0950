"""The sum primitive on every device: against the float64 numpy reference and ONNX's
reference evaluator (Sum of inputs each scaled by Mul); one to forty inputs (more than one
kernel takes); plain, channels-last, blocked (padded), strided and mixed layouts; both call
forms and oneDNN's choice of destination layout; in-place use; queries and errors (outputs
untouched after a refused call)."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.sum import sum_ as ref_sum

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
MS = dnnl.ARG_MULTIPLE_SRC


def _md(dims, t):
    return dnnl.memory.desc(dims, dt.f32, t)


def _xs(seed, dims, n):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-2, 2, dims).astype(np.float32) for _ in range(n)]


def _close(got, scales, xs):
    want = ref_sum(scales, xs)
    scale = sum(abs(s) * np.abs(x.astype(np.float64)) for s, x in zip(scales, xs))
    err = np.abs(np.asarray(got, np.float64) - want)
    bad = err > 2e-6 * len(xs) * scale + 1e-7
    assert not bad.any(), f"{bad.sum()} of {bad.size} differ; got {got[bad][:4]}, want " \
                          f"{want[bad][:4]}"


def run(engine, stream, xs, scales, tags, dst=None, with_dst=True, inplace=False):
    mds = [_md(list(x.shape), t) if isinstance(t, str) else t for x, t in zip(xs, tags)]
    if with_dst:
        dmd = dst if isinstance(dst, dnnl.memory.desc) else _md(list(xs[0].shape),
                                                                 dst or tag.any)
        pd = dnnl.sum.primitive_desc(engine, dmd, scales, mds)
    else:
        pd = dnnl.sum.primitive_desc(engine, scales, mds)
    mems = [dnnl.memory(pd.src_desc(i), engine, x) for i, x in enumerate(xs)]
    out = mems[0] if inplace else dnnl.memory(pd.dst_desc(), engine)
    args = {MS + i: m for i, m in enumerate(mems)}
    args[dnnl.ARG_DST] = out
    dnnl.sum(pd).execute(stream, args)
    stream.wait()
    return out.to_numpy(), pd


CASES = {  # n inputs, tags, dst tag (None: the form without dst), impl
    "one": (1, ["abcd"], "abcd", "flat"),
    "two-plain": (2, ["abcd", "abcd"], None, "flat"),
    "three-nhwc": (3, ["acdb"] * 3, tag.any, "flat"),
    "mixed": (3, ["abcd", "acdb", "abdc"], "abcd", "strided"),
    "blocked": (2, ["aBcd16b", "aBcd16b"], None, "strided"),  # C = 20: padded blocks
    "blocked-mixed": (3, ["abcd", "aBcd8b", "acdb"], tag.any, "strided"),
    "many": (40, ["abcd"] * 39 + ["acdb"], None, "strided"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_reference(engine, stream, case):
    n, tags, dtag, impl = CASES[case]
    xs = _xs(len(case), [2, 20, 3, 5], n)
    scales = list(np.linspace(-1.5, 2.0, n)) if n > 1 else [0.25]
    y, pd = run(engine, stream, xs, scales, tags, dtag, with_dst=dtag is not None)
    _close(y, scales, xs)
    assert pd.impl_info_str() == f"ocl:sum:{impl}"
    assert pd.get_scales() == [float(s) for s in scales]


def test_dst_layout_rule(engine):
    """No dst (or any): the first blocked source's layout, else the first source's."""
    dims = [2, 20, 3, 5]
    pd = dnnl.sum.primitive_desc(engine, [1, 1], [_md(dims, "acdb"), _md(dims, "aBcd16b")])
    assert pd.dst_desc() == _md(dims, "aBcd16b")
    pd = dnnl.sum.primitive_desc(engine, [1, 1], [_md(dims, "acdb"), _md(dims, "abcd")])
    assert pd.dst_desc() == _md(dims, "acdb")
    strided = dnnl.memory.desc(dims, dt.f32, [1000, 40, 10, 2])  # not dense: dst is dense
    pd = dnnl.sum.primitive_desc(engine, _md(dims, tag.any), [2.0], [strided])
    assert pd.dst_desc() == _md(dims, "abcd")


def test_strided_source(engine, stream):
    dims = [2, 3, 4]
    strided = dnnl.memory.desc(dims, dt.f32, [40, 12, 2])
    xs = _xs(5, dims, 2)
    y, pd = run(engine, stream, xs, [1.0, -1.0], [strided, "abc"], "cba")
    _close(y, [1.0, -1.0], xs)


def _onnx_sum(xs, scales):
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    shape = list(xs[0].shape)
    nodes, inits, terms = [], [], []
    for i, s in enumerate(scales):
        inits.append(helper.make_tensor(f"s{i}", TensorProto.FLOAT, [], [float(s)]))
        nodes.append(helper.make_node("Mul", [f"x{i}", f"s{i}"], [f"t{i}"]))
        terms.append(f"t{i}")
    nodes.append(helper.make_node("Sum", terms, ["y"]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, shape)
                     for i in range(len(xs))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    return ReferenceEvaluator(model).run(None, {f"x{i}": x for i, x in enumerate(xs)})[0]


def test_matches_onnx(engine, stream):
    xs = _xs(9, [3, 4, 5, 6], 4)
    scales = [0.5, 2.0, -1.0, 0.125]
    y, _ = run(engine, stream, xs, scales, ["abcd", "acdb", "abcd", "abcd"], "abcd")
    np.testing.assert_allclose(y, _onnx_sum(xs, scales), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [3, 40])
def test_inplace(engine, stream, n):
    """dst is src 0's memory (in the first pass when the sum runs in several)."""
    xs = _xs(11, [4, 8, 5], n)
    scales = [1.0] + [0.5] * (n - 1)
    y, _ = run(engine, stream, xs, scales, ["abc"] * n, "abc", inplace=True)
    _close(y, scales, xs)


def test_queries_and_keywords(engine):
    dims = [2, 3]
    mds = [_md(dims, "ab"), _md(dims, "ba")]
    pd = dnnl.sum.primitive_desc(engine=engine, scales=[1.0, 2.0], srcs=mds)
    assert pd.src_desc(0) == mds[0] and pd.src_desc(1) == mds[1]
    assert pd.src_desc(2) == dnnl.memory.desc()
    assert pd.query_md(dnnl.query.src_md, 1) == mds[1]
    assert pd.query_md(dnnl.query.exec_arg_md, MS + 1) == mds[1]
    assert pd.dst_desc() == mds[0]
    pd = dnnl.sum.primitive_desc(engine, dst_desc=_md(dims, "ba"), scales=[1, 1], srcs=mds)
    assert pd.dst_desc() == mds[1]
    assert isinstance(dnnl.sum(pd), dnnl.sum)


def _bad_attr():
    attr = dnnl.primitive_attr()
    ops = dnnl.post_ops()
    ops.append_eltwise(dnnl.algorithm.eltwise_relu, 0.0, 0.0)
    attr.set_post_ops(ops)
    return attr


@pytest.mark.parametrize("case, err, match", [
    ("scales", dnnl.invalid_arguments, "2 scales for 3"),
    ("dims", dnnl.invalid_arguments, "broadcast"),
    ("dst_dims", dnnl.invalid_arguments, "dst_desc dims"),
    ("rank", dnnl.invalid_arguments, "dims"),
    ("src_any", dnnl.invalid_arguments, "srcs\\[1\\]"),
    ("empty", dnnl.invalid_arguments, "srcs"),
    ("bf16", dnnl.unimplemented, "bf16"),
    ("attr", dnnl.unimplemented, "post-ops"),
])
def test_bad_descs(engine, case, err, match):
    dims = [2, 3, 4]
    mds = [_md(dims, "abc")] * 3
    scales, dst, attr = [1.0, 1.0, 1.0], _md(dims, "abc"), None
    if case == "scales":
        scales = [1.0, 1.0]
    elif case == "dims":
        mds = [_md(dims, "abc"), _md([2, 3, 1], "abc"), _md(dims, "abc")]
    elif case == "dst_dims":
        dst = _md([2, 3, 5], "abc")
    elif case == "rank":
        mds = [_md(dims, "abc"), _md([2, 3], "ab"), _md(dims, "abc")]
    elif case == "src_any":
        mds = [_md(dims, "abc"), _md(dims, tag.any), _md(dims, "abc")]
    elif case == "empty":
        mds, scales = [], []
    elif case == "bf16":
        mds = [_md(dims, "abc"), dnnl.memory.desc(dims, dt.bf16, "abc"), _md(dims, "abc")]
    else:
        attr = _bad_attr()
    with pytest.raises(err, match=match):
        dnnl.sum.primitive_desc(engine, dst, scales, mds, attr)


def test_bad_execute_leaves_outputs_untouched(engine, stream):
    dims = [2, 3, 4]
    md = _md(dims, "abc")
    pd = dnnl.sum.primitive_desc(engine, md, [1.0, 1.0], [md, md])
    prim = dnnl.sum(pd)
    xs = _xs(13, dims, 2)
    a, b = dnnl.memory(md, engine, xs[0]), dnnl.memory(md, engine, xs[1])
    sentinel = np.full(dims, -7.0, np.float32)
    c = dnnl.memory(md, engine, sentinel)
    with pytest.raises(dnnl.invalid_arguments, match="missing"):
        prim.execute(stream, {MS: a, dnnl.ARG_DST: c})
    with pytest.raises(dnnl.invalid_arguments, match="desc"):
        prim.execute(stream, {MS: a, MS + 1: dnnl.memory(_md(dims, "cba"), engine, xs[1]),
                              dnnl.ARG_DST: c})
    with pytest.raises(dnnl.invalid_arguments, match="unexpected"):
        prim.execute(stream, {MS: a, MS + 1: b, MS + 2: b, dnnl.ARG_DST: c})
    stream.wait()
    np.testing.assert_array_equal(c.to_numpy(), sentinel)
    # 40 sources run in two passes: a source of the second pass cannot be dst
    mds = [md] * 40
    pd40 = dnnl.sum.primitive_desc(engine, md, [1.0] * 40, mds)
    mems = {MS + i: dnnl.memory(md, engine, xs[0]) for i in range(40)}
    mems[dnnl.ARG_DST] = mems[MS + 39]
    with pytest.raises(dnnl.invalid_arguments, match="several passes"):
        dnnl.sum(pd40).execute(stream, mems)
    stream.wait()
    np.testing.assert_array_equal(mems[MS + 39].to_numpy(), xs[0])


# ---- bf16 and f16 ----------------------------------------------------------------------------
# Inputs are rounded to their type first; the sum runs in f32 (each addition within 2^-24 of
# the running magnitude) and rounds once to dst's type (unit roundoff EPS: bf16 2^-8, f16
# 2^-11). Tolerance: 2 * EPS[dst] * |ref| + n * 2^-23 * sum |scale * x|, plus f16's subnormal
# spacing 2^-24.
EPS = {dt.bf16: 2.0 ** -8, dt.f16: 2.0 ** -11, dt.f32: 2.0 ** -24}
LOW = {  # source type, dst type (None: the form without dst), tags, n
    "bf16": (dt.bf16, None, ["abcd", "abcd"], 2),
    "f16-blocked": (dt.f16, dt.f16, ["aBcd16b", "acdb", "abcd"], 3),
    "bf16-to-f32": (dt.bf16, dt.f32, ["acdb"] * 3, 3),
    "f32-to-f16": (dt.f32, dt.f16, ["abcd", "abcd"], 2),
    "bf16-many": (dt.bf16, dt.bf16, ["abcd"] * 34, 34),  # two launches, the second adds
}


@pytest.mark.parametrize("case", list(LOW))
def test_bf16_f16(engine, stream, case):
    sdt, ddt, tags, n = LOW[case]
    dims = [2, 20, 3, 5]
    xs = _xs(9, dims, n)
    scales = list(np.linspace(-1.5, 2.0, n))
    mds = [dnnl.memory.desc(dims, sdt, t) for t in tags]
    pd = (dnnl.sum.primitive_desc(engine, scales, mds) if ddt is None else
          dnnl.sum.primitive_desc(engine, dnnl.memory.desc(dims, ddt, tag.any), scales, mds))
    ddt = ddt or sdt
    assert pd.dst_desc().data_type == ddt
    mems = [dnnl.memory(md, engine, x) for md, x in zip(mds, xs)]
    stored = [m.to_numpy().astype(np.float64) for m in mems]
    args = {MS + i: m for i, m in enumerate(mems)}
    out = args[dnnl.ARG_DST] = dnnl.memory(pd.dst_desc(), engine)
    dnnl.sum(pd).execute(stream, args)
    stream.wait()
    want = ref_sum(scales, stored)
    scale = sum(abs(s) * np.abs(x) for s, x in zip(scales, stored))
    got = out.to_numpy().astype(np.float64)
    # more than one launch rounds dst between them: one EPS per launch
    launches = 1 + (n > 32)
    tol = (2 * launches * EPS[ddt] * (np.abs(want) + (launches > 1) * scale)
           + n * 2.0 ** -23 * scale + (2.0 ** -24 if ddt == dt.f16 else 0.0))
    bad = np.abs(got - want) > tol
    assert not bad.any(), f"{bad.sum()} differ; got {got[bad][:4]}, want {want[bad][:4]}"


def test_mixed_source_types_refused(engine):
    dims = [2, 3]
    mds = [dnnl.memory.desc(dims, dt.bf16, "ab"), dnnl.memory.desc(dims, dt.f16, "ab")]
    with pytest.raises(dnnl.unimplemented, match="srcs\\[1\\] data type f16"):
        dnnl.sum.primitive_desc(engine, [1.0, 1.0], mds)
