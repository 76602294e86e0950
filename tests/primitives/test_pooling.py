"""The pooling primitives against the float64 numpy reference, ONNX's reference evaluator
(MaxPool with its Indices output, AveragePool with count_include_pad 0 and 1) and finite
differences for every backward; 1-D, 2-D and 3-D; plain, channels-last, blocked and strided
layouts; strides, dilation, asymmetric and negative right padding; errors name the argument
and leave outputs untouched."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.primitives.pooling import pooling_output_size
from pydnnl.reference.pooling import pooling_backward as ref_bwd
from pydnnl.reference.pooling import pooling_forward as ref_fwd

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
ALG = {"max": dnnl.algorithm.pooling_max,
       "avg_include_padding": dnnl.algorithm.pooling_avg_include_padding,
       "avg_exclude_padding": dnnl.algorithm.pooling_avg_exclude_padding}
train, infer = dnnl.prop_kind.forward_training, dnnl.prop_kind.forward_inference

# name: (src dims, kernel, strides, dilation, padding_l, padding_r, src tag)
GEOMS = {
    "1d": ([2, 3, 11], [3], [2], [0], [1], [1], "abc"),
    "1d_nwc_dil": ([2, 5, 13], [3], [1], [2], [2], [0], "acb"),
    "2d_nchw": ([2, 3, 9, 8], [3, 3], [2, 2], [0, 0], [1, 1], [1, 1], "abcd"),
    "2d_nhwc_asym": ([2, 7, 9, 10], [3, 2], [2, 3], [0, 1], [1, 0], [0, 2], "acdb"),
    "2d_blocked16": ([2, 20, 7, 7], [3, 3], [1, 1], [0, 0], [1, 1], [1, 1], "aBcd16b"),
    "2d_blocked8_dil": ([1, 8, 10, 9], [2, 3], [2, 2], [1, 1], [0, 1], [1, 0], "aBcd8b"),
    "2d_neg_pad_r": ([2, 4, 9, 9], [3, 3], [3, 3], [0, 0], [0, 0], [-2, -1], "abcd"),
    "2d_overlap": ([1, 2, 8, 8], [4, 4], [1, 1], [0, 0], [2, 2], [1, 1], "abcd"),
    "3d_ncdhw": ([1, 3, 5, 6, 7], [2, 3, 3], [2, 1, 2], [0, 0, 1], [0, 1, 1], [1, 1, 0],
                 "abcde"),
    "3d_ndhwc": ([2, 4, 4, 5, 5], [3, 2, 2], [1, 2, 2], [0, 0, 0], [1, 0, 1], [1, 1, 0],
                 "acdeb"),
}


def _untied(shape, seed):
    """Distinct values 0.5 apart (a random permutation): max pooling has no ties and a
    finite-difference step cannot change the winner."""
    n = int(np.prod(shape))
    return (np.random.default_rng(seed).permutation(n).astype(np.float64) * 0.5
            - n / 4).reshape(shape).astype(np.float32)


def _dst_dims(src_dims, k, s, d, pl, pr):
    return list(src_dims[:2]) + [pooling_output_size(i, *a) for i, a in
                                 zip(src_dims[2:], zip(k, s, d, pl, pr))]


def _forward(engine, stream, x, alg, geom, src_tag, dst_tag=tag.any, prop=train):
    k, s, d, pl, pr = geom
    src_md = dnnl.memory.desc(list(x.shape), dt.f32, src_tag)
    dst_md = dnnl.memory.desc(_dst_dims(x.shape, k, s, d, pl, pr), dt.f32, dst_tag)
    pd = dnnl.pooling_forward.primitive_desc(engine, prop, ALG[alg], src_md, dst_md, s, k, d,
                                             pl, pr)
    src = dnnl.memory(pd.src_desc(), engine)
    src.write(x)
    dst = dnnl.memory(pd.dst_desc(), engine)
    args = {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst}
    ws = None
    if not pd.workspace_desc().is_zero():
        ws = args[dnnl.ARG_WORKSPACE] = dnnl.memory(pd.workspace_desc(), engine)
    dnnl.pooling_forward(pd).execute(stream, args)
    stream.wait()
    return pd, dst.to_numpy(), ws


def _backward(engine, stream, fwd_pd, g, ws, alg, geom, src_tag=tag.any, dst_tag=tag.any):
    k, s, d, pl, pr = geom
    src_dims, dst_dims = fwd_pd.src_desc().dims, fwd_pd.dst_desc().dims
    pd = dnnl.pooling_backward.primitive_desc(
        engine, ALG[alg], dnnl.memory.desc(src_dims, dt.f32, src_tag),
        dnnl.memory.desc(dst_dims, dt.f32, dst_tag), s, k, d, pl, pr, fwd_pd)
    gm = dnnl.memory(pd.diff_dst_desc(), engine)
    gm.write(g)
    out = dnnl.memory(pd.diff_src_desc(), engine)
    args = {dnnl.ARG_DIFF_DST: gm, dnnl.ARG_DIFF_SRC: out}
    if alg == "max":
        args[dnnl.ARG_WORKSPACE] = ws
    dnnl.pooling_backward(pd).execute(stream, args)
    stream.wait()
    return pd, out.to_numpy()


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()))


def _valid(name, alg):
    """avg_exclude_padding needs both paddings below the kernel extent (see test_errors)."""
    _, k, _, d, pl, pr, _ = GEOMS[name]
    return alg != "avg_exclude_padding" or all(
        p < (kk - 1) * (dd + 1) + 1 for p, kk, dd in zip(pl + pr, k + k, d + d))


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("name,alg", [(n, a) for n in GEOMS for a in ALG if _valid(n, a)])
def test_forward_and_backward_match_reference(engine, stream, name, alg):
    dims, k, s, d, pl, pr, src_tag = GEOMS[name]
    geom = (k, s, d, pl, pr)
    x = _untied(dims, len(name))
    fwd_pd, got, ws = _forward(engine, stream, x, alg, geom, src_tag)
    want, want_ws = ref_fwd(x, alg, k, s, d, pl, pr)
    _close(got, want)
    assert fwd_pd.dst_desc() == dnnl.memory.desc(want.shape, dt.f32, src_tag)  # any follows src
    if alg == "max":
        np.testing.assert_array_equal(ws.to_numpy(), want_ws)
    g = np.random.default_rng(7).standard_normal(want.shape).astype(np.float32)
    _, diff_src = _backward(engine, stream, fwd_pd, g, ws, alg, geom)
    _close(diff_src, ref_bwd(g, dims, alg, k, s, d, pl, pr, want_ws))


@pytest.mark.parametrize("alg", list(ALG))
@pytest.mark.parametrize("dims,geom", [
    ([1, 2, 7], ([3], [2], [1], [1], [1])),
    ([1, 2, 6, 5], ([3, 2], [2, 1], [0, 1], [1, 1], [1, 0])),
    ([1, 1, 4, 5, 4], ([2, 3, 2], [1, 2, 2], [0, 0, 1], [1, 1, 1], [0, 1, 1])),
], ids=["1d", "2d", "3d"])
def test_backward_matches_finite_differences(engine, stream, alg, dims, geom):
    """d(sum(dst * g))/d(src) by central differences in float64 through the reference
    forward; max pooling on inputs without ties (a step never changes the winner)."""
    k, s, d, pl, pr = geom
    x = _untied(dims, 3)
    fwd_pd, _, ws = _forward(engine, stream, x, alg, geom, "abcde"[:len(dims)])
    want, _ = ref_fwd(x, alg, k, s, d, pl, pr)
    g = np.random.default_rng(11).standard_normal(want.shape)
    _, got = _backward(engine, stream, fwd_pd, g.astype(np.float32), ws, alg, geom)
    x64, eps = x.astype(np.float64), 1e-3
    num = np.zeros_like(x64)
    for i in np.ndindex(x64.shape):
        xp, xm = x64.copy(), x64.copy()
        xp[i] += eps
        xm[i] -= eps
        num[i] = (np.sum(ref_fwd(xp, alg, k, s, d, pl, pr)[0] * g)
                  - np.sum(ref_fwd(xm, alg, k, s, d, pl, pr)[0] * g)) / (2 * eps)
    np.testing.assert_allclose(got, num, rtol=1e-4, atol=1e-4)


def test_ties_record_the_first_and_route_through_it(engine, stream):
    """Few distinct values: the workspace holds the first maximum in (kh, kw) order, and the
    gradient goes to that point only (overlapping windows add up)."""
    x = np.random.default_rng(5).integers(0, 3, (2, 3, 7, 7)).astype(np.float32)
    geom = ([3, 3], [1, 1], [0, 0], [1, 1], [1, 1])
    fwd_pd, got, ws = _forward(engine, stream, x, "max", geom, tag.nhwc)
    want, want_ws = ref_fwd(x, "max", *geom)
    np.testing.assert_array_equal(got, want)
    w = ws.to_numpy()
    np.testing.assert_array_equal(w, want_ws)
    # closed form of the first-maximum rule on one window
    n, c, oh, ow = 1, 2, 3, 4
    win = [(kh * 3 + kw, x[n, c, oh - 1 + kh, ow - 1 + kw]) for kh in range(3) for kw in range(3)]
    assert w[n, c, oh, ow] == next(i for i, v in win if v == max(v for _, v in win))
    g = np.ones(want.shape, np.float32)
    _, diff_src = _backward(engine, stream, fwd_pd, g, ws, "max", geom)
    _close(diff_src, ref_bwd(g, x.shape, "max", *geom, workspace=w))
    assert diff_src.sum() == g.size  # every gradient lands exactly once


def test_large_kernel_uses_s32_workspace(engine, stream):
    x = _untied([1, 2, 17, 18], 9)
    geom = ([16, 16], [1, 2], [0, 0], [0, 1], [0, 1])
    fwd_pd, got, ws = _forward(engine, stream, x, "max", geom, tag.nchw)
    assert fwd_pd.workspace_desc().get_data_type() == dt.s32
    want, want_ws = ref_fwd(x, "max", *geom)
    _close(got, want)
    np.testing.assert_array_equal(ws.to_numpy(), want_ws)
    g = np.random.default_rng(2).standard_normal(want.shape).astype(np.float32)
    _, diff_src = _backward(engine, stream, fwd_pd, g, ws, "max", geom)
    _close(diff_src, ref_bwd(g, x.shape, "max", *geom, workspace=want_ws))


def test_strided_and_mixed_layouts(engine, stream):
    """A src with gaps between rows (a strided view), dst and diff descs in other layouts."""
    x = _untied([2, 3, 6, 7], 4)
    strides = [3 * 6 * 9, 6 * 9, 9, 1]  # rows of 9 floats, 7 used
    geom = ([2, 3], [2, 2], [0, 0], [0, 1], [0, 1])
    fwd_pd, got, ws = _forward(engine, stream, x, "max", geom, strides, dst_tag=tag.nhwc)
    want, want_ws = ref_fwd(x, "max", *geom)
    _close(got, want)
    g = np.random.default_rng(3).standard_normal(want.shape).astype(np.float32)
    bpd, diff_src = _backward(engine, stream, fwd_pd, g, ws, "max", geom, tag.nChw8c, tag.nchw)
    assert bpd.diff_src_desc() == dnnl.memory.desc(x.shape, dt.f32, tag.nChw8c)
    _close(diff_src, ref_bwd(g, x.shape, "max", *geom, workspace=want_ws))


def _onnx_run(node_kw, op, x, outputs):
    k, st, pads = node_kw["kernel_shape"], node_kw["strides"], node_kw["pads"]
    dil, nsp = node_kw.get("dilations", [1] * len(k)), len(k)
    out = list(x.shape[:2]) + [pooling_output_size(i, kk, ss, dd - 1, pads[j], pads[nsp + j])
                               for j, (i, kk, ss, dd) in enumerate(zip(x.shape[2:], k, st, dil))]
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node(op, ["X"], outputs, **node_kw)
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("X", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT if o == "Y" else TensorProto.INT64,
                                       out) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    onnx.checker.check_model(model)
    return ReferenceEvaluator(model).run(None, {"X": x})


ONNX_CASES = {
    # name: (src dims, kernel, strides, onnx dilations (1 = dense), pads begin, pads end)
    "1d": ([2, 3, 12], [3], [2], [1], [1], [1]),
    "2d": ([2, 3, 9, 10], [3, 2], [2, 1], [1, 1], [1, 0], [0, 1]),
    "2d_dilated": ([1, 2, 11, 10], [3, 3], [1, 2], [2, 2], [2, 1], [1, 2]),
    "3d": ([1, 2, 5, 6, 6], [2, 3, 3], [1, 2, 2], [1, 1, 1], [0, 1, 1], [1, 1, 0]),
}


@pytest.mark.parametrize("name", list(ONNX_CASES))
def test_max_matches_onnx_maxpool_and_indices(engine, stream, name):
    """ONNX's MaxPool (its dilations count from 1); its Indices (flat positions in the input)
    must be the points our workspace names."""
    dims, k, s, dil, pb, pe = ONNX_CASES[name]
    x = _untied(dims, 21)
    y, idx = _onnx_run(dict(kernel_shape=k, strides=s, dilations=dil, pads=pb + pe),
                       "MaxPool", x, ["Y", "Indices"])
    geom = (k, s, [v - 1 for v in dil], pb, pe)
    _, got, ws = _forward(engine, stream, x, "max", geom, "abcde"[:len(dims)])
    np.testing.assert_array_equal(got, y)
    # the workspace's window index -> the flat input position it names
    w = ws.to_numpy().astype(np.int64)
    nsp = len(dims) - 2
    flat = np.zeros(w.shape, np.int64)
    rem = w.copy()
    pos = []
    for j in reversed(range(nsp)):
        kj = rem % k[j]
        rem //= k[j]
        o = np.arange(w.shape[2 + j]).reshape([-1 if a == j else 1 for a in range(nsp)])
        pos.insert(0, o * s[j] - pb[j] + kj * dil[j])
    nc = (np.arange(dims[0])[:, None] * dims[1] + np.arange(dims[1])[None, :])
    flat = nc.reshape(nc.shape + (1,) * nsp)
    for j in range(nsp):
        flat = flat * dims[2 + j] + pos[j]
    np.testing.assert_array_equal(flat, idx)


@pytest.mark.parametrize("include", [0, 1])
@pytest.mark.parametrize("name", ["1d", "2d", "3d"])
def test_avg_matches_onnx_averagepool(engine, stream, name, include):
    dims, k, s, _, pb, pe = ONNX_CASES[name]
    x = np.random.default_rng(4).standard_normal(dims).astype(np.float32)
    (y,) = _onnx_run(dict(kernel_shape=k, strides=s, pads=pb + pe, count_include_pad=include),
                     "AveragePool", x, ["Y"])
    alg = "avg_include_padding" if include else "avg_exclude_padding"
    geom = (k, s, [0] * len(k), pb, pe)
    _, got, _ = _forward(engine, stream, x, alg, geom, "abcde"[:len(dims)], prop=infer)
    np.testing.assert_allclose(got, y, rtol=1e-5, atol=1e-6)


def test_queries_workspace_and_keyword_form(cpu_engine):
    src = dnnl.memory.desc([2, 16, 8, 8], dt.f32, tag.nChw16c)
    dst = dnnl.memory.desc([2, 16, 4, 4], dt.f32, tag.any)
    pd = dnnl.pooling_forward.primitive_desc(
        aengine=cpu_engine, aprop_kind=train, aalgorithm=dnnl.algorithm.pooling_max,
        src_desc=src, dst_desc=dst, strides=[2, 2], kernel=[3, 3], dilation=[0, 0],
        padding_l=[1, 1], padding_r=[0, 0])
    assert pd.dst_desc() == dnnl.memory.desc([2, 16, 4, 4], dt.f32, tag.nChw16c)
    assert pd.workspace_desc() == dnnl.memory.desc([2, 16, 4, 4], dt.u8, tag.nChw16c)
    assert pd.query_md(dnnl.query.workspace_md) == pd.workspace_desc()
    assert pd.get_algorithm() == dnnl.algorithm.pooling_max
    assert pd.get_prop_kind() == train
    assert (pd.get_strides(), pd.get_kernel(), pd.get_dilations(), pd.get_padding_l(),
            pd.get_padding_r()) == ([2, 2], [3, 3], [0, 0], [1, 1], [0, 0])
    assert pd.scratchpad_desc().is_zero()
    inf = dnnl.pooling_forward.primitive_desc(cpu_engine, infer, dnnl.algorithm.pooling_max,
                                              src, dst, [2, 2], [3, 3], [0, 0], [1, 1], [0, 0])
    assert inf.workspace_desc().is_zero()
    avg = dnnl.pooling_forward.primitive_desc(
        cpu_engine, train, dnnl.algorithm.pooling_avg_include_padding, src, dst, [2, 2],
        [3, 3], [0, 0], [1, 1], [0, 0])
    assert avg.workspace_desc().is_zero()
    bpd = dnnl.pooling_backward.primitive_desc(
        cpu_engine, dnnl.algorithm.pooling_max, dnnl.memory.desc([2, 16, 8, 8], dt.f32, tag.any),
        dnnl.memory.desc([2, 16, 4, 4], dt.f32, tag.any), [2, 2], [3, 3], [0, 0], [1, 1],
        [0, 0], pd)
    assert bpd.diff_src_desc() == src
    assert bpd.workspace_desc() == pd.workspace_desc()
    assert bpd.get_prop_kind() == dnnl.prop_kind.backward_data


# -- errors --------------------------------------------------------------------------------------
def _descs(src_dims, dst_dims, src_tag="abcd", dst_tag="abcd", dtype=dt.f32):
    return (dnnl.memory.desc(src_dims, dtype, src_tag), dnnl.memory.desc(dst_dims, dtype, dst_tag))


@pytest.mark.parametrize("alg,dims,params,match", [
    ("max", ([2, 3, 8, 8], [2, 3, 5, 4]), ([2, 2], [3, 3], [0, 0], [1, 1], [1, 1]),
     r"dst_desc spatial dim 0 is 5, expected .* = 4"),
    ("max", ([2, 3, 8, 8], [2, 4, 4, 4]), ([2, 2], [3, 3], [0, 0], [1, 1], [1, 1]),
     r"dst_desc dims \[2, 4, 4, 4\] must have src_desc's C = 3"),
    ("max", ([2, 3, 8, 8], [2, 3, 4, 4]), ([2], [3, 3], [0, 0], [1, 1], [1, 1]),
     r"strides must be a list of 2 ints"),
    ("max", ([2, 3, 8, 8], [2, 3, 4, 4]), ([0, 2], [3, 3], [0, 0], [1, 1], [1, 1]),
     r"strides\[0\] must be >= 1, got 0"),
    ("max", ([2, 3, 8, 8], [2, 3, 4, 4]), ([2, 2], [3, 3], [-1, 0], [1, 1], [1, 1]),
     r"dilation\[0\] must be >= 0"),
    ("max", ([2, 3, 8, 8], [2, 3, 4, 4]), ([2, 2], [3, 3], [0, 0], [-1, 1], [3, 1]),
     r"padding_l\[0\] must be >= 0, got -1"),
    ("max", ([2, 3, 8, 8], [2, 3, 3, 4]), ([2, 2], [3, 3], [0, 0], [1, 1], [-3, 1]),
     r"padding_r\[0\] must be >= -strides\[0\] = -2, got -3"),
    ("avg_exclude_padding", ([2, 3, 8, 8], [2, 3, 5, 4]), ([2, 2], [3, 3], [0, 0], [3, 1],
                                                          [1, 1]),
     r"pooling_avg_exclude_padding needs padding_l\[0\] = 3"),
    ("max", ([2, 3, 8], [2, 3, 4, 4]), ([2, 2], [3, 3], [0, 0], [1, 1], [1, 1]),
     r"must have as many dimensions"),
])
def test_errors_name_the_argument(cpu_engine, alg, dims, params, match):
    s, d = (dnnl.memory.desc(x, dt.f32, "abcde"[:len(x)]) for x in dims)
    with pytest.raises(dnnl.invalid_arguments, match=match):
        dnnl.pooling_forward.primitive_desc(cpu_engine, train, ALG[alg], s, d, *params)


def test_bad_kinds_types_and_attrs(cpu_engine):
    p = ([2, 2], [2, 2], [0, 0], [0, 0], [0, 0])
    s, d = _descs([1, 2, 4, 4], [1, 2, 2, 2])
    with pytest.raises(dnnl.invalid_arguments, match="algorithm must be pooling_max"):
        dnnl.pooling_forward.primitive_desc(cpu_engine, train, dnnl.algorithm.eltwise_relu, s, d,
                                            *p)
    with pytest.raises(dnnl.invalid_arguments, match="prop_kind must be forward_training"):
        dnnl.pooling_forward.primitive_desc(cpu_engine, dnnl.prop_kind.backward_data,
                                            ALG["max"], s, d, *p)
    with pytest.raises(dnnl.invalid_arguments, match="src_desc must have a concrete layout"):
        dnnl.pooling_forward.primitive_desc(cpu_engine, train, ALG["max"],
                                            dnnl.memory.desc([1, 2, 4, 4], dt.f32, tag.any), d, *p)
    hs, hd = _descs([1, 2, 4, 4], [1, 2, 2, 2], dtype=dt.s8)
    with pytest.raises(dnnl.unimplemented, match="src_desc data type s8; f32, bf16 and f16"):
        dnnl.pooling_forward.primitive_desc(cpu_engine, train, ALG["max"], hs, hd, *p)
    attr = dnnl.primitive_attr()
    ops = dnnl.post_ops()
    ops.append_sum(1.0)  # oneDNN's pooling takes eltwise and binary, not sum
    attr.set_post_ops(ops)
    with pytest.raises(dnnl.unimplemented, match="post-ops"):
        dnnl.pooling_forward.primitive_desc(cpu_engine, train, ALG["max"], s, d, *p, attr)


def test_backward_hint_errors(cpu_engine):
    p = ([2, 2], [2, 2], [0, 0], [0, 0], [0, 0])
    s, d = _descs([1, 2, 4, 4], [1, 2, 2, 2])
    inf = dnnl.pooling_forward.primitive_desc(cpu_engine, infer, ALG["max"], s, d, *p)
    with pytest.raises(dnnl.invalid_arguments, match="hint_fwd_pd was created for "
                                                     "forward_inference"):
        dnnl.pooling_backward.primitive_desc(cpu_engine, ALG["max"], s, d, *p, inf)
    with pytest.raises(dnnl.invalid_arguments, match="hint_fwd_pd must be a pooling_forward"):
        dnnl.pooling_backward.primitive_desc(cpu_engine, ALG["max"], s, d, *p, None)
    tr = dnnl.pooling_forward.primitive_desc(cpu_engine, train, ALG["max"], s, d, *p)
    with pytest.raises(dnnl.invalid_arguments, match="hint_fwd_pd was created for pooling_max"):
        dnnl.pooling_backward.primitive_desc(cpu_engine, ALG["avg_include_padding"], s, d, *p,
                                             tr)
    s2, d2 = _descs([1, 2, 5, 4], [1, 2, 2, 2])
    with pytest.raises(dnnl.invalid_arguments, match=r"diff_src_desc dims \[1, 2, 5, 4\] differ"):
        dnnl.pooling_backward.primitive_desc(cpu_engine, ALG["max"], s2, d2, *p, tr)


def test_execute_errors_leave_outputs_untouched(cpu_engine):
    s = dnnl.stream(cpu_engine)
    p = ([2, 2], [2, 2], [0, 0], [0, 0], [0, 0])
    sd, dd = _descs([1, 2, 4, 4], [1, 2, 2, 2])
    pd = dnnl.pooling_forward.primitive_desc(cpu_engine, train, ALG["max"], sd, dd, *p)
    prim = dnnl.pooling_forward(pd)
    src = dnnl.memory(sd, cpu_engine, np.ones((1, 2, 4, 4), np.float32))
    dst = dnnl.memory(dd, cpu_engine, np.full((1, 2, 2, 2), 7.0, np.float32))
    with pytest.raises(dnnl.invalid_arguments, match="missing argument .*WORKSPACE"):
        prim.execute(s, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    ws = dnnl.memory(pd.workspace_desc(), cpu_engine)
    wrong = dnnl.memory(dnnl.memory.desc([1, 2, 4, 4], dt.f32, tag.nhwc), cpu_engine,
                        np.ones((1, 2, 4, 4), np.float32))
    with pytest.raises(dnnl.invalid_arguments, match="ARG_SRC has desc"):
        prim.execute(s, {dnnl.ARG_SRC: wrong, dnnl.ARG_DST: dst, dnnl.ARG_WORKSPACE: ws})
    s.wait()
    assert (dst.to_numpy() == 7.0).all()


# -- bf16 / f16 data -------------------------------------------------------------------------
# Unit roundoff of the storage types: the kernels compute in f32 and round once on store
# (round to nearest even, oneDNN's rule), so an output is within one rounding (u = 2^-9 for
# bf16, 2^-12 for f16, relative) of the float64 result on the inputs as stored; the bound
# below allows 2u relative plus 1e-5 of the largest value for the f32 arithmetic.
UNIT = {"bf16": 2.0 ** -9, "f16": 2.0 ** -12}
LOW_GEOMS = {
    "nchw_3x3s2": ([2, 3, 17, 19], [3, 3], [2, 2], [0, 0], [1, 1], [1, 1], "abcd"),
    "nhwc_3x3s2": ([2, 20, 9, 10], [3, 3], [2, 2], [0, 0], [1, 1], [1, 0], "acdb"),
    "nChw16c_2x2": ([1, 20, 8, 8], [2, 2], [2, 2], [0, 0], [0, 0], [0, 0], "aBcd16b"),
    "ncdhw_dil": ([1, 2, 4, 7, 9], [2, 2, 3], [1, 2, 3], [0, 1, 0], [0, 1, 1], [1, 0, 1],
                  "abcde"),
}


def _low_close(got, want, kind):
    bound = 2 * UNIT[kind] * np.abs(want) + 1e-5 * max(1.0, np.abs(want).max())
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) - bound))


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("kind", ["bf16", "f16"])
@pytest.mark.parametrize("name,alg", [(n, a) for n in LOW_GEOMS for a in ALG])
def test_bf16_f16_match_reference_of_stored_inputs(engine, stream, kind, name, alg):
    dims, k, s, d, pl, pr, t = LOW_GEOMS[name]
    typ = dt[kind]
    x = np.random.default_rng(len(name)).standard_normal(dims).astype(np.float32) * 3
    out = _dst_dims(dims, k, s, d, pl, pr)
    src_md, dst_md = dnnl.memory.desc(dims, typ, t), dnnl.memory.desc(out, typ, tag.any)
    pd = dnnl.pooling_forward.primitive_desc(engine, train, ALG[alg], src_md, dst_md, s, k, d,
                                             pl, pr)
    assert pd.dst_desc() == dnnl.memory.desc(out, typ, t)
    src = dnnl.memory(src_md, engine, x)
    xs = src.to_numpy().astype(np.float64)          # the input as stored (rounded)
    dst = dnnl.memory(pd.dst_desc(), engine)
    args = {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst}
    if alg == "max":
        args[dnnl.ARG_WORKSPACE] = dnnl.memory(pd.workspace_desc(), engine)
    dnnl.pooling_forward(pd).execute(stream, args)
    stream.wait()
    want, want_ws = ref_fwd(xs, alg, k, s, d, pl, pr)
    got = dst.to_numpy().astype(np.float64)
    if alg == "max":
        # the maximum of stored values is stored exactly; ties follow the first-max rule
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(args[dnnl.ARG_WORKSPACE].to_numpy(), want_ws)
    else:
        _low_close(got, want, kind)
    bpd = dnnl.pooling_backward.primitive_desc(
        engine, ALG[alg], dnnl.memory.desc(dims, typ, tag.any),
        dnnl.memory.desc(out, typ, tag.any), s, k, d, pl, pr, pd)
    assert bpd.diff_src_desc() == src_md
    gm = dnnl.memory(bpd.diff_dst_desc(), engine,
                     np.random.default_rng(3).standard_normal(out).astype(np.float32))
    gs = gm.to_numpy().astype(np.float64)
    dsm = dnnl.memory(bpd.diff_src_desc(), engine)
    bargs = {dnnl.ARG_DIFF_DST: gm, dnnl.ARG_DIFF_SRC: dsm}
    if alg == "max":
        bargs[dnnl.ARG_WORKSPACE] = args[dnnl.ARG_WORKSPACE]
    dnnl.pooling_backward(bpd).execute(stream, bargs)
    stream.wait()
    _low_close(dsm.to_numpy().astype(np.float64),
               ref_bwd(gs, dims, alg, k, s, d, pl, pr, want_ws), kind)


# global pooling (one window over the whole source): the averages and max inference run as a
# reduction over the spatial dims; max training keeps the pooling kernel (its workspace)
GLOBAL = {
    "2d_nchw": ([2, 5, 7, 7], [0, 0], "abcd"),
    "2d_nchw_pad_r": ([3, 4, 5, 6], [1, 2], "abcd"),
    "2d_nhwc": ([2, 19, 7, 7], [0, 0], "acdb"),
    "1d_ncw": ([3, 2, 37], [0], "abc"),
    "3d_ncdhw": ([2, 3, 3, 4, 5], [0, 0, 0], "abcde"),
    "2d_blocked8": ([2, 16, 3, 3], [0, 0], "aBcd8b"),
}


@pytest.mark.parametrize("alg,prop", [("avg_include_padding", infer),
                                      ("avg_exclude_padding", train), ("max", infer),
                                      ("max", train)], ids=["avg_p", "avg_np", "max", "max_ws"])
@pytest.mark.parametrize("name", list(GLOBAL))
def test_global_pooling_matches_reference(engine, stream, name, alg, prop):
    dims, pr, src_tag = GLOBAL[name]
    nsp = len(dims) - 2
    geom = (dims[2:], [v + 1 for v in pr], [0] * nsp, [0] * nsp, pr)  # one window per dim
    x = _untied(dims, len(name))
    pd, got, ws = _forward(engine, stream, x, alg, geom, src_tag, prop=prop)
    want, want_ws = ref_fwd(x, alg, *geom)
    _close(got, want)
    assert ("reduction" in pd.impl_info_str()) == (ws is None), pd.impl_info_str()
    if ws is not None:
        np.testing.assert_array_equal(ws.to_numpy(), want_ws)


@pytest.mark.parametrize("typ", [dt.bf16, dt.f16], ids=lambda t: t.name)
def test_global_pooling_low_precision(engine, stream, typ):
    """bf16/f16 global average pooling as a reduction: float accumulation, one rounding of
    the result (the reference runs over the stored inputs)."""
    dims = [2, 6, 7, 7]
    src_md = dnnl.memory.desc(dims, typ, tag.abcd)
    dst_md = dnnl.memory.desc([2, 6, 1, 1], typ, tag.any)
    pd = dnnl.pooling_forward.primitive_desc(engine, infer, ALG["avg_exclude_padding"], src_md,
                                             dst_md, [1, 1], [7, 7], [0, 0], [0, 0], [0, 0])
    assert "reduction" in pd.impl_info_str()
    src = dnnl.memory(src_md, engine, _untied(dims, 3) / 16)
    dst = dnnl.memory(pd.dst_desc(), engine)
    dnnl.pooling_forward(pd).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    stream.wait()
    x = src.to_numpy().astype(np.float64)
    want, _ = ref_fwd(x, "avg_exclude_padding", [7, 7], [1, 1], [0, 0], [0, 0], [0, 0])
    eps = 2.0 ** -8 if typ == dt.bf16 else 2.0 ** -11
    got = dst.to_numpy().astype(np.float64)
    assert np.all(np.abs(got - want) <= eps * np.abs(want) + 1e-6)


# CPUs: a strided width in plain layouts runs as an interior kernel (the lanes whose windows
# lie inside: vector loads forward, no bounds checks backward) and an edge kernel
INTERIOR = {
    "2d_s2": ([2, 3, 5, 40], [3, 3], [2, 2], [0, 0], [1, 1], [1, 1], "abcd"),
    "2d_s3_dil": ([1, 2, 4, 64], [2, 3], [1, 3], [0, 1], [0, 2], [0, 1], "abcd"),
    "1d_s2_k4": ([2, 3, 45], [4], [2], [0], [1], [2], "abc"),
    "3d_s2": ([1, 2, 3, 4, 38], [2, 2, 3], [1, 1, 2], [0, 0, 0], [0, 1, 1], [1, 0, 1],
              "abcde"),
}


@pytest.mark.parametrize("alg", list(ALG))
@pytest.mark.parametrize("name", list(INTERIOR))
def test_interior_and_edge_kernels_match_reference(engine, stream, name, alg):
    dims, k, s, d, pl, pr, src_tag = INTERIOR[name]
    geom = (k, s, d, pl, pr)
    x = _untied(dims, len(name) + 3)
    fwd_pd, got, ws = _forward(engine, stream, x, alg, geom, src_tag)
    want, want_ws = ref_fwd(x, alg, k, s, d, pl, pr)
    _close(got, want)
    if alg == "max":
        np.testing.assert_array_equal(ws.to_numpy(), want_ws)
    g = np.random.default_rng(9).standard_normal(want.shape).astype(np.float32)
    bwd_pd, diff_src = _backward(engine, stream, fwd_pd, g, ws, alg, geom)
    _close(diff_src, ref_bwd(g, dims, alg, k, s, d, pl, pr, want_ws))
    for pd in (fwd_pd, bwd_pd):
        assert ("interior+edges" in pd.impl_info_str()) == (not engine.info.is_gpu)


@pytest.mark.parametrize("typ", [dt.bf16, dt.f16], ids=lambda t: t.name)
def test_interior_kernels_low_precision(engine, stream, typ):
    """bf16/f16 data through the interior forward's vector loads and the backward split."""
    dims, k, s, d, pl, pr = [2, 3, 6, 40], [3, 3], [2, 2], [0, 0], [1, 1], [1, 1]
    out = _dst_dims(dims, k, s, d, pl, pr)
    sm, dm = dnnl.memory.desc(dims, typ, tag.abcd), dnnl.memory.desc(out, typ, tag.abcd)
    fpd = dnnl.pooling_forward.primitive_desc(engine, train, ALG["max"], sm, dm, s, k, d, pl, pr)
    src, dst = dnnl.memory(sm, engine, _untied(dims, 4) / 64), dnnl.memory(dm, engine)
    ws = dnnl.memory(fpd.workspace_desc(), engine)
    dnnl.pooling_forward(fpd).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst,
                                               dnnl.ARG_WORKSPACE: ws})
    stream.wait()
    x = src.to_numpy().astype(np.float32)
    want, want_ws = ref_fwd(x, "max", k, s, d, pl, pr)
    np.testing.assert_array_equal(dst.to_numpy().astype(np.float32), want)  # max: exact
    np.testing.assert_array_equal(ws.to_numpy(), want_ws)
    bpd = dnnl.pooling_backward.primitive_desc(engine, ALG["max"], sm, dm, s, k, d, pl, pr, fpd)
    gm = dnnl.memory(dm, engine, np.random.default_rng(3).standard_normal(out))
    out_m = dnnl.memory(sm, engine)
    dnnl.pooling_backward(bpd).execute(stream, {dnnl.ARG_DIFF_DST: gm, dnnl.ARG_DIFF_SRC: out_m,
                                                dnnl.ARG_WORKSPACE: ws})
    stream.wait()
    g = gm.to_numpy().astype(np.float64)
    want_b = ref_bwd(g, dims, "max", k, s, d, pl, pr, want_ws)
    eps = 2.0 ** -8 if typ == dt.bf16 else 2.0 ** -11
    got_b = out_m.to_numpy().astype(np.float64)
    assert np.all(np.abs(got_b - want_b) <= eps * np.abs(want_b) + 1e-6)


def test_launch_rules_closed_form():
    """runtime/heuristics/pooling.py on made-up devices: CPUs take exactly the lanes (16..256)
    and split strided widths into interior and edges; GPUs take power-of-two lanes and one
    kernel."""
    from pydnnl.engine import DeviceInfo
    from pydnnl.runtime.heuristics.pooling import split_interior, work_group_size

    def info(kind):
        return DeviceInfo(name="made-up", vendor="v", platform="p", driver_version="1",
                          device_version="OpenCL 3.0", type=kind, compute_units=8,
                          global_mem_bytes=1 << 34, local_mem_bytes=1 << 16,
                          max_work_group_size=1024, max_clock_mhz=0, fp16=True, fp64=True,
                          preferred_float_vector_width=1)

    cpu, gpu = info("cpu"), info("gpu")
    assert work_group_size(cpu, 55, 229376) == (55, 4)
    assert work_group_size(gpu, 55, 229376) == (64, 4)
    assert work_group_size(cpu, 7, 65536) == work_group_size(gpu, 7, 65536) == (8, 32)
    assert work_group_size(cpu, 3, 2) == (0, 0)
    assert split_interior(cpu) and not split_interior(gpu)
