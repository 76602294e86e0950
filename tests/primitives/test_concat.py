"""The concat primitive on every device: against the numpy reference and ONNX's reference
evaluator (Concat) along every axis; one to forty sources (more than one kernel takes); plain,
channels-last, blocked (padded), strided and mixed layouts; both call forms and oneDNN's choice
of destination layout; queries and errors (outputs untouched after a refused call)."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference.concat import concat as ref_concat

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
MS = dnnl.ARG_MULTIPLE_SRC


def _md(dims, t):
    return dnnl.memory.desc(dims, dt.f32, t)


def _xs(seed, shapes):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-2, 2, s).astype(np.float32) for s in shapes]


def _shapes(base, axis, sizes):
    out = []
    for n in sizes:
        s = list(base)
        s[axis] = n
        out.append(s)
    return out


def run(engine, stream, xs, axis, tags, dst=None, with_dst=True):
    mds = [_md(list(x.shape), t) if isinstance(t, str) else t for x, t in zip(xs, tags)]
    if with_dst:
        dims = list(xs[0].shape)
        dims[axis] = sum(x.shape[axis] for x in xs)
        dmd = dst if isinstance(dst, dnnl.memory.desc) else _md(dims, dst or tag.any)
        pd = dnnl.concat.primitive_desc(engine, dmd, axis, mds)
    else:
        pd = dnnl.concat.primitive_desc(engine, axis, mds)
    args = {MS + i: dnnl.memory(pd.src_desc(i), engine, x) for i, x in enumerate(xs)}
    out = args[dnnl.ARG_DST] = dnnl.memory(pd.dst_desc(), engine)
    dnnl.concat(pd).execute(stream, args)
    stream.wait()
    return out.to_numpy(), pd


@pytest.mark.sampled(every=2)
@pytest.mark.parametrize("axis", [0, 1, 2, 3])
@pytest.mark.parametrize("tags", [("abcd", "abcd", "abcd"), ("acdb", "abcd", "aBcd8b")],
                         ids=["plain", "mixed"])
def test_every_axis(engine, stream, axis, tags):
    xs = _xs(axis, _shapes([2, 3, 4, 5], axis, [3, 1, 2]))
    y, pd = run(engine, stream, xs, axis, tags, with_dst=False)
    np.testing.assert_array_equal(y, ref_concat(axis, xs))
    assert pd.get_concat_dimension() == axis


CASES = {  # axis, sizes, source tags, dst tag
    "nhwc-channels": (1, [16, 8, 24], ["acdb"] * 3, "acdb"),
    "blocked-channels": (1, [16, 32], ["aBcd16b"] * 2, tag.any),
    "blocked-padded": (1, [5, 20, 3], ["abcd"] * 3, "aBcd16b"),      # dst padded to 32
    "blocked-split": (1, [8, 8, 4], ["aBcd8b", "abcd", "aBcd8b"], "aBcd8b"),
    "long-rows": (2, [3, 2], ["abcd", "abdc"], "abcd"),
    "many": (0, [1] * 40, ["abcd"] * 40, tag.any),
    "many-mixed": (1, list(range(1, 36)), ["abcd", "acdb"] * 17 + ["abcd"], "acdb"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_layouts(engine, stream, case):
    axis, sizes, tags, dtag = CASES[case]
    base = [2, 4, 3, 300] if case == "long-rows" else [2, 4, 3, 5]
    xs = _xs(len(case), _shapes(base, axis, sizes))
    y, pd = run(engine, stream, xs, axis, tags, dtag)
    np.testing.assert_array_equal(y, ref_concat(axis, xs))


def test_strided_sources(engine, stream):
    a = dnnl.memory.desc([2, 3, 4], dt.f32, [100, 30, 3])
    b = _md([2, 3, 4], "abc").submemory_desc([2, 3, 2], [0, 0, 1])
    xs = _xs(3, [[2, 3, 4], [2, 3, 2]])
    mds = [a, b]
    pd = dnnl.concat.primitive_desc(engine, 2, mds)
    assert pd.dst_desc() == _md([2, 3, 6], "abc")  # dense in the first plain source's order
    ma = dnnl.memory(a, engine, xs[0])
    whole = np.zeros([2, 3, 4], np.float32)
    whole[:, :, 1:3] = xs[1]
    mb = dnnl.memory(b, engine, dnnl.memory(_md([2, 3, 4], "abc"), engine, whole).buffer)
    out = dnnl.memory(pd.dst_desc(), engine)
    dnnl.concat(pd).execute(stream, {MS: ma, MS + 1: mb, dnnl.ARG_DST: out})
    stream.wait()
    np.testing.assert_array_equal(out.to_numpy(), ref_concat(2, xs))


def test_dst_layout_rule(engine):
    """No dst (or any): the first blocked source whose blocks cut at every source's start,
    else the first plain source's layout."""
    mk = lambda c, t: _md([2, c, 3, 5], t)  # noqa: E731
    pd = dnnl.concat.primitive_desc(engine, 1, [mk(16, "acdb"), mk(16, "aBcd16b")])
    assert pd.dst_desc() == mk(32, "aBcd16b")
    # 8 channels then 16: blocks of 16 cannot start at 8; the plain source's layout wins
    pd = dnnl.concat.primitive_desc(engine, 1, [mk(8, "acdb"), mk(16, "aBcd16b")])
    assert pd.dst_desc() == mk(24, "acdb")
    pd = dnnl.concat.primitive_desc(engine, 1, [mk(8, "aBcd8b"), mk(16, "aBcd16b")])
    assert pd.dst_desc() == mk(24, "aBcd8b")
    pd = dnnl.concat.primitive_desc(engine, 1, [mk(4, "aBcd8b"), mk(4, "aBcd8b")])
    assert pd.dst_desc() == mk(8, "abcd")  # nothing fits, nothing plain: abcd


def _onnx(xs, axis):
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    out = list(xs[0].shape)
    out[axis] = sum(x.shape[axis] for x in xs)
    node = helper.make_node("Concat", [f"x{i}" for i in range(len(xs))], ["y"], axis=axis)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, list(x.shape))
                      for i, x in enumerate(xs)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    return ReferenceEvaluator(model).run(None, {f"x{i}": x for i, x in enumerate(xs)})[0]


@pytest.mark.parametrize("axis", [1, 3])
def test_matches_onnx(engine, stream, axis):
    xs = _xs(7 + axis, _shapes([3, 4, 2, 6], axis, [2, 5, 1, 3]))
    y, _ = run(engine, stream, xs, axis, ["abcd", "acdb", "abcd", "abdc"], "abcd")
    np.testing.assert_array_equal(y, _onnx(xs, axis))


def test_queries_and_keywords(engine):
    mds = [_md([2, 3], "ab"), _md([2, 5], "ba")]
    pd = dnnl.concat.primitive_desc(engine=engine, concat_dimension=1, srcs=mds)
    assert pd.src_desc(0) == mds[0] and pd.src_desc(1) == mds[1]
    assert pd.query_md(dnnl.query.src_md, 1) == mds[1]
    assert pd.query_md(dnnl.query.exec_arg_md, MS + 1) == mds[1]
    assert pd.dst_desc() == _md([2, 8], "ab")
    pd = dnnl.concat.primitive_desc(engine, dst_desc=_md([2, 8], "ba"), concat_dimension=1,
                                    srcs=mds)
    assert pd.dst_desc() == _md([2, 8], "ba")
    assert isinstance(dnnl.concat(pd), dnnl.concat)


@pytest.mark.parametrize("case, err, match", [
    ("axis", dnnl.invalid_arguments, "concat_dimension"),
    ("negative", dnnl.invalid_arguments, "concat_dimension"),
    ("dims", dnnl.invalid_arguments, "dimension 2"),
    ("dst_dims", dnnl.invalid_arguments, "dst_desc dims"),
    ("rank", dnnl.invalid_arguments, "dims"),
    ("src_any", dnnl.invalid_arguments, "srcs\\[1\\]"),
    ("empty", dnnl.invalid_arguments, "srcs"),
    ("bf16", dnnl.unimplemented, "bf16"),
    ("attr", dnnl.unimplemented, "post-ops"),
])
def test_bad_descs(engine, case, err, match):
    mds = [_md([2, 3, 4], "abc"), _md([2, 5, 4], "abc")]
    axis, dst, attr = 1, _md([2, 8, 4], "abc"), None
    if case == "axis":
        axis = 3
    elif case == "negative":
        axis = -1
    elif case == "dims":
        mds[1] = _md([2, 5, 5], "abc")
    elif case == "dst_dims":
        dst = _md([2, 7, 4], "abc")
    elif case == "rank":
        mds[1] = _md([2, 5], "ab")
    elif case == "src_any":
        mds[1] = _md([2, 5, 4], tag.any)
    elif case == "empty":
        mds = []
    elif case == "bf16":
        mds[1] = dnnl.memory.desc([2, 5, 4], dt.bf16, "abc")
    else:
        attr = dnnl.primitive_attr()
        ops = dnnl.post_ops()
        ops.append_eltwise(dnnl.algorithm.eltwise_relu, 0.0, 0.0)
        attr.set_post_ops(ops)
    with pytest.raises(err, match=match):
        dnnl.concat.primitive_desc(engine, dst, axis, mds, attr)


def test_bad_execute_leaves_outputs_untouched(engine, stream):
    mds = [_md([2, 3], "ab"), _md([2, 5], "ab")]
    pd = dnnl.concat.primitive_desc(engine, 1, mds)
    prim = dnnl.concat(pd)
    xs = _xs(5, [[2, 3], [2, 5]])
    a, b = dnnl.memory(mds[0], engine, xs[0]), dnnl.memory(mds[1], engine, xs[1])
    sentinel = np.full([2, 8], -7.0, np.float32)
    c = dnnl.memory(pd.dst_desc(), engine, sentinel)
    with pytest.raises(dnnl.invalid_arguments, match="missing"):
        prim.execute(stream, {MS: a, dnnl.ARG_DST: c})
    with pytest.raises(dnnl.invalid_arguments, match="desc"):
        prim.execute(stream, {MS: b, MS + 1: a, dnnl.ARG_DST: c})
    stream.wait()
    np.testing.assert_array_equal(c.to_numpy(), sentinel)
    # dst sharing a source's buffer is refused (the copy would read what it overwrote)
    holder = dnnl.memory(pd.dst_desc(), engine, sentinel)
    b2 = dnnl.memory(mds[1], engine, holder.buffer)
    b2.write(xs[1])
    with pytest.raises(dnnl.invalid_arguments, match="in place"):
        prim.execute(stream, {MS: a, MS + 1: b2, dnnl.ARG_DST: holder})
    stream.wait()
    np.testing.assert_array_equal(b2.to_numpy(), xs[1])


# ---- bf16 and f16 ----------------------------------------------------------------------------
# A concat of one type is a copy: the stored bits must come back unchanged (checked on the raw
# storage, with NaNs, infinities, subnormals and negative zero among the values). A dst of
# another type rounds each value once: equal to the memory's own conversion of the values.
LOW = {  # type, axis, sizes, source tags, dst tag
    "bf16-channels": (dt.bf16, 1, [16, 8], ["abcd", "abcd"], tag.any),        # long rows
    "f16-innermost": (dt.f16, 3, [16, 32], ["abcd", "abcd"], tag.any),        # one launch
    "bf16-innermost-odd": (dt.bf16, 3, [5, 3, 7], ["abcd"] * 3, "abcd"),     # flat
    "f16-blocked-split": (dt.f16, 1, [8, 4, 8], ["aBcd8b", "abcd", "acdb"], "aBcd8b"),
    "bf16-nhwc": (dt.bf16, 1, [16, 16], ["acdb", "acdb"], tag.any),          # short rows
}


def _special(rng, shape, t):
    x = rng.uniform(-2, 2, shape).astype(np.float32)
    flat = x.reshape(-1)
    tiny = 1e-40 if t == dt.bf16 else 3e-6  # subnormal in the type
    specials = np.float32([np.nan, np.inf, -np.inf, -0.0, tiny, -tiny])
    flat[:len(specials)] = specials[:flat.size]
    return x


@pytest.mark.parametrize("case", list(LOW))
def test_bf16_f16_bit_exact(engine, stream, case):
    t, axis, sizes, tags, dtag = LOW[case]
    rng = np.random.default_rng(4)
    shapes = _shapes([2, 3, 4, 5], axis, sizes)
    xs = [_special(rng, s, t) for s in shapes]
    mds = [dnnl.memory.desc(s, t, tg) for s, tg in zip(shapes, tags)]
    dims = list(shapes[0])
    dims[axis] = sum(sizes)
    pd = dnnl.concat.primitive_desc(engine, dnnl.memory.desc(dims, t, dtag), axis, mds)
    assert pd.dst_desc().data_type == t
    mems = [dnnl.memory(md, engine, x) for md, x in zip(mds, xs)]
    args = {MS + i: m for i, m in enumerate(mems)}
    out = args[dnnl.ARG_DST] = dnnl.memory(pd.dst_desc(), engine)
    dnnl.concat(pd).execute(stream, args)
    stream.wait()
    # the bits of every source element, in logical order, against dst's
    raw = out.read_raw()
    got = raw[pd.dst_desc().element_offsets()]
    want = np.concatenate([m.read_raw()[m.get_desc().element_offsets()] for m in mems], axis)
    assert got.dtype.itemsize == 2
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("src_t, dst_t", [(dt.f32, dt.bf16), (dt.bf16, dt.f32),
                                          (dt.f32, dt.f16)])
def test_type_conversion(engine, stream, src_t, dst_t):
    axis = 3
    shapes = _shapes([2, 3, 4, 5], axis, [16, 16])
    xs = _xs(5, shapes)
    mds = [dnnl.memory.desc(s, src_t, "abcd") for s in shapes]
    pd = dnnl.concat.primitive_desc(engine, dnnl.memory.desc([2, 3, 4, 32], dst_t, tag.any),
                                    axis, mds)
    mems = [dnnl.memory(md, engine, x) for md, x in zip(mds, xs)]
    args = {MS + i: m for i, m in enumerate(mems)}
    out = args[dnnl.ARG_DST] = dnnl.memory(pd.dst_desc(), engine)
    dnnl.concat(pd).execute(stream, args)
    stream.wait()
    # the memory's host conversion rounds to nearest even, as the kernel must
    want = dnnl.memory(pd.dst_desc(), engine,
                       np.concatenate([m.to_numpy() for m in mems], axis)).to_numpy()
    np.testing.assert_array_equal(out.to_numpy(), want)


def test_mixed_source_types_refused(engine):
    mds = [dnnl.memory.desc([2, 3], dt.bf16, "ab"), dnnl.memory.desc([2, 3], dt.f32, "ab")]
    with pytest.raises(dnnl.unimplemented, match="srcs\\[1\\] data type f32"):
        dnnl.concat.primitive_desc(engine, 1, mds)
