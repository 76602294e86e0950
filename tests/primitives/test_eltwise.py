"""The eltwise primitives on every device: every algorithm forward against the float64 numpy
reference and ONNX's reference evaluator (where ONNX has the op), backward against the
reference and central finite differences of the forward formula; plain, channels-last,
blocked, strided, mixed and ``any`` layouts; in-place use; queries, call forms and errors
(outputs untouched after a refused call)."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference import eltwise as ref

A = dnnl.algorithm
dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
FWD = dnnl.prop_kind.forward_training
DIMS = [2, 3, 4, 5]

# (algorithm, alpha, beta, domain): "pos" draws x in (0.1, 3)
CASES = [
    (A.eltwise_relu, 0.0, 0.0, "all"), (A.eltwise_relu, 0.2, 0.0, "all"),
    (A.eltwise_tanh, 0.0, 0.0, "all"), (A.eltwise_elu, 0.7, 0.0, "all"),
    (A.eltwise_square, 0.0, 0.0, "all"), (A.eltwise_abs, 0.0, 0.0, "all"),
    (A.eltwise_sqrt, 0.0, 0.0, "pos"), (A.eltwise_linear, 1.5, -0.25, "all"),
    (A.eltwise_soft_relu, 1.0, 0.0, "all"), (A.eltwise_soft_relu, -2.0, 0.0, "all"),
    (A.eltwise_hardsigmoid, 0.2, 0.5, "all"), (A.eltwise_logistic, 0.0, 0.0, "all"),
    (A.eltwise_exp, 0.0, 0.0, "all"), (A.eltwise_gelu_tanh, 0.0, 0.0, "all"),
    (A.eltwise_gelu_erf, 0.0, 0.0, "all"), (A.eltwise_swish, 1.5, 0.0, "all"),
    (A.eltwise_log, 0.0, 0.0, "pos"), (A.eltwise_clip, -0.5, 0.75, "all"),
    (A.eltwise_clip_v2, -1.0, 0.5, "all"), (A.eltwise_pow, 0.5, 3.0, "all"),
    (A.eltwise_pow, 2.0, 0.5, "pos"), (A.eltwise_round, 0.0, 0.0, "all"),
    (A.eltwise_mish, 0.0, 0.0, "all"), (A.eltwise_hardswish, 1 / 6, 0.5, "all"),
    (A.eltwise_relu_use_dst_for_bwd, 0.1, 0.0, "all"),
    (A.eltwise_tanh_use_dst_for_bwd, 0.0, 0.0, "all"),
    (A.eltwise_elu_use_dst_for_bwd, 1.0, 0.0, "all"),
    (A.eltwise_sqrt_use_dst_for_bwd, 0.0, 0.0, "pos"),
    (A.eltwise_logistic_use_dst_for_bwd, 0.0, 0.0, "all"),
    (A.eltwise_exp_use_dst_for_bwd, 0.0, 0.0, "all"),
    (A.eltwise_clip_v2_use_dst_for_bwd, -1.0, 0.5, "all"),
]
IDS = [f"{a.name[8:]}({al:g},{be:g})" for a, al, be, _ in CASES]
BWD_CASES = [c for c in CASES if c[0] != A.eltwise_round]
BWD_IDS = [i for c, i in zip(CASES, IDS) if c[0] != A.eltwise_round]
USES_DST = {a for a in A if a.name.endswith("_use_dst_for_bwd")}


def _x(seed, domain, dims=DIMS, kinks=()):
    rng = np.random.default_rng(seed)
    n = int(np.prod(dims))
    x = rng.uniform(0.1, 3.0, n) if domain == "pos" else rng.uniform(-3.0, 3.0, n)
    for k in kinks:  # keep finite differences off the points where f' jumps
        near = np.abs(x - k) < 0.02
        x[near] = k + 0.05
    return x.reshape(dims).astype(np.float32)


def _kinks(alg, alpha, beta):
    """Points where the derivative is discontinuous (finite differences skip them)."""
    name = alg.name[8:].replace("_use_dst_for_bwd", "")
    if name in ("relu", "elu", "abs"):
        return (0.0,)
    if name in ("clip", "clip_v2"):
        return (alpha, beta)
    if name in ("hardsigmoid", "hardswish"):
        return (-beta / alpha, (1 - beta) / alpha)
    return ()


def _close(got, want, scale, rtol=2e-5, atol=2e-6):
    got = np.asarray(got, np.float64)
    err = np.abs(got - want)
    bad = ~((err <= rtol * np.abs(want) + atol * scale) | (np.isnan(got) & np.isnan(want)))
    assert not bad.any(), (f"{bad.sum()} of {bad.size} differ; first got {got[bad][:4]}, "
                           f"want {want[bad][:4]}")


def _md(dims, t):
    return dnnl.memory.desc(dims, dt.f32, t)


def forward(engine, stream, alg, alpha, beta, x, src_tag="abcd", dst_tag=None, inplace=False):
    src_md = _md(list(x.shape), src_tag) if isinstance(src_tag, str) else src_tag
    dst_md = src_md if dst_tag is None else (
        _md(list(x.shape), dst_tag) if isinstance(dst_tag, str) else dst_tag)
    pd = dnnl.eltwise_forward.primitive_desc(engine, FWD, alg, src_md, dst_md, alpha, beta)
    src = dnnl.memory(pd.src_desc(), engine, x)
    dst = src if inplace else dnnl.memory(pd.dst_desc(), engine)
    dnnl.eltwise_forward(pd).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    stream.wait()
    return dst.to_numpy(), pd


def backward(engine, stream, alg, alpha, beta, v, dd, data_tag="abcd", diff_tag=None,
             inplace=False):
    data_md = _md(list(v.shape), data_tag) if isinstance(data_tag, str) else data_tag
    diff_md = data_md if diff_tag is None else (
        _md(list(v.shape), diff_tag) if isinstance(diff_tag, str) else diff_tag)
    pd = dnnl.eltwise_backward.primitive_desc(engine, alg, diff_md, diff_md, data_md, alpha,
                                              beta)
    arg = dnnl.ARG_DST if alg in USES_DST else dnnl.ARG_SRC
    data = dnnl.memory(data_md, engine, v)
    ddm = dnnl.memory(pd.diff_dst_desc(), engine, dd)
    dsm = ddm if inplace else dnnl.memory(pd.diff_src_desc(), engine)
    dnnl.eltwise_backward(pd).execute(stream, {arg: data, dnnl.ARG_DIFF_DST: ddm,
                                               dnnl.ARG_DIFF_SRC: dsm})
    stream.wait()
    return dsm.to_numpy(), pd


# ---- every algorithm ------------------------------------------------------------------------

@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_forward_matches_reference(engine, stream, case):
    alg, alpha, beta, domain = CASES[case]
    x = _x(case, domain)
    y, pd = forward(engine, stream, alg, alpha, beta, x)
    _close(y, ref.eltwise_forward(alg, x, alpha, beta), np.maximum(1, np.abs(x)))
    assert pd.impl_info_str() == "ocl:eltwise:flat"


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("case", range(len(BWD_CASES)), ids=BWD_IDS)
def test_backward_matches_reference_and_finite_differences(engine, stream, case):
    alg, alpha, beta, domain = BWD_CASES[case]
    x = _x(100 + case, domain, kinks=_kinks(alg, alpha, beta))
    dd = np.random.default_rng(case).standard_normal(DIMS).astype(np.float32)
    if alg in USES_DST:  # dst as the forward primitive wrote it
        v, _ = forward(engine, stream, alg, alpha, beta, x)
    else:
        v = x
    dx, pd = backward(engine, stream, alg, alpha, beta, v, dd)
    scale = np.abs(dd) * np.maximum(1, np.abs(x))
    _close(dx, ref.eltwise_backward(alg, dd, v, alpha, beta), scale)
    x64, h = x.astype(np.float64), 1e-5
    fd = (ref.eltwise_forward(alg, x64 + h, alpha, beta)
          - ref.eltwise_forward(alg, x64 - h, alpha, beta)) / (2 * h) * dd
    # float32 inputs (dst for the use_dst variants) limit the agreement with the float64 slope
    _close(dx, fd, scale, rtol=1e-4, atol=2e-5 if alg in USES_DST else 1e-6)
    assert pd.get_prop_kind() == dnnl.prop_kind.backward_data


def test_edge_conventions_on_device(engine, stream):
    """relu at 0 takes alpha; clip passes the gradient at beta, not at alpha; clip_v2 at
    neither; round is half to even."""
    x = np.array([[0.0, -0.5, 0.75, 0.3, 2.5, -2.5, 1.5, 0.5]], np.float32)
    dd = np.full_like(x, 2.0)
    got, _ = backward(engine, stream, A.eltwise_relu, 0.25, 0.0, x, dd, "ab")
    assert got[0, 0] == 0.5
    got, _ = backward(engine, stream, A.eltwise_clip, -0.5, 0.75, x, dd, "ab")
    np.testing.assert_array_equal(got[0, :4], [2.0, 0.0, 2.0, 2.0])
    got, _ = backward(engine, stream, A.eltwise_clip_v2, -0.5, 0.75, x, dd, "ab")
    np.testing.assert_array_equal(got[0, :4], [2.0, 0.0, 0.0, 2.0])
    y, _ = forward(engine, stream, A.eltwise_round, 0.0, 0.0, x, "ab")
    np.testing.assert_array_equal(y[0, 4:], [2.0, -2.0, 2.0, 0.0])


# ---- ONNX's reference evaluator --------------------------------------------------------------

def _onnx(op, x, attrs=None, extra=()):
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    inputs = ["x"] + [f"c{i}" for i in range(len(extra))]
    node = helper.make_node(op, inputs, ["y"], **(attrs or {}))
    inits = [helper.make_tensor(f"c{i}", TensorProto.FLOAT, [], [float(v)])
             for i, v in enumerate(extra)]
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    onnx.checker.check_model(model)
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


ONNX = [
    # (algorithm, alpha, beta, op, attributes, constant inputs, domain)
    (A.eltwise_relu, 0.0, 0.0, "Relu", {}, (), "all"),
    (A.eltwise_relu, 0.15, 0.0, "LeakyRelu", {"alpha": 0.15}, (), "all"),
    (A.eltwise_tanh, 0.0, 0.0, "Tanh", {}, (), "all"),
    (A.eltwise_elu, 0.8, 0.0, "Elu", {"alpha": 0.8}, (), "all"),
    (A.eltwise_abs, 0.0, 0.0, "Abs", {}, (), "all"),
    (A.eltwise_sqrt, 0.0, 0.0, "Sqrt", {}, (), "pos"),
    (A.eltwise_exp, 0.0, 0.0, "Exp", {}, (), "all"),
    (A.eltwise_log, 0.0, 0.0, "Log", {}, (), "pos"),
    (A.eltwise_logistic, 0.0, 0.0, "Sigmoid", {}, (), "all"),
    (A.eltwise_hardsigmoid, 0.3, 0.4, "HardSigmoid", {"alpha": 0.3, "beta": 0.4}, (), "all"),
    (A.eltwise_soft_relu, 1.0, 0.0, "Softplus", {}, (), "all"),
    (A.eltwise_clip, -0.5, 1.25, "Clip", {}, (-0.5, 1.25), "all"),
    (A.eltwise_clip_v2, -0.5, 1.25, "Clip", {}, (-0.5, 1.25), "all"),
    (A.eltwise_pow, 1.0, 3.0, "Pow", {}, (3.0,), "all"),
    (A.eltwise_pow, 1.0, 0.5, "Pow", {}, (0.5,), "pos"),
    (A.eltwise_round, 0.0, 0.0, "Round", {}, (), "all"),
    (A.eltwise_mish, 0.0, 0.0, "Mish", {}, (), "all"),
    (A.eltwise_hardswish, 1 / 6, 0.5, "HardSwish", {}, (), "all"),
    (A.eltwise_gelu_erf, 0.0, 0.0, "Gelu", {"approximate": "none"}, (), "all"),
    (A.eltwise_gelu_tanh, 0.0, 0.0, "Gelu", {"approximate": "tanh"}, (), "all"),
]


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("case", range(len(ONNX)),
                         ids=[f"{c[3]}-{c[0].name[8:]}({c[1]:.3g},{c[2]:.3g})" for c in ONNX])
def test_forward_matches_onnx(engine, stream, case):
    alg, alpha, beta, op, attrs, extra, domain = ONNX[case]
    x = _x(300 + case, domain)
    if alg == A.eltwise_round:  # halves: ONNX rounds them to even too
        x.flat[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5]
    y, _ = forward(engine, stream, alg, alpha, beta, x)
    want = _onnx(op, x, attrs, extra).astype(np.float64)
    _close(y, want, np.maximum(1, np.abs(x)), rtol=1e-5, atol=1e-6)


# ---- layouts ---------------------------------------------------------------------------------

def _strided_md(dims):
    """Plain layout with gaps: the last dim padded to 8, the channel dim outermost."""
    n, c, h, w = dims
    return dnnl.memory.desc(dims, dt.f32, (h * 8, n * h * 8, 8, 1))


LAYOUTS = {
    # name: (src or data desc maker, dst or diff desc maker, expected kernel)
    "nchw": ("abcd", "abcd", "flat"),
    "nhwc": ("acdb", "acdb", "flat"),
    "nChw16c": ("nChw16c", "nChw16c", "strided"),   # C = 3 padded to 16: padding untouched
    "nChw8c_c16": ("nChw8c", "nChw8c", "flat"),     # C = 16: dense blocks, flat
    "strided": ("strided", "strided", "strided"),
    "nchw_to_nhwc": ("abcd", "acdb", "strided"),
    "nhwc_any": ("acdb", "any", "flat"),
    "strided_any": ("strided", "any", "strided"),  # dst dense in src's order, src gaps
}


def _desc(spec, dims):
    if spec == "strided":
        return _strided_md(dims)
    return _md(dims, spec)


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_layouts_forward_and_backward(engine, stream, name):
    s_spec, d_spec, impl = LAYOUTS[name]
    dims = [2, 16, 3, 5] if name == "nChw8c_c16" else DIMS
    s_md, d_md = _desc(s_spec, dims), _desc(d_spec, dims)
    alg, alpha, beta = A.eltwise_elu, 0.5, 0.0
    x = _x(7, "all", dims)
    pd = dnnl.eltwise_forward.primitive_desc(engine, FWD, alg, s_md, d_md, alpha, beta)
    assert pd.impl_info_str() == f"ocl:eltwise:{impl}", pd.impl_info_str()
    if d_spec == "any":
        assert pd.dst_desc().is_dense() and not pd.dst_desc().is_any()
    src = dnnl.memory(s_md, engine, x)
    dst = dnnl.memory(pd.dst_desc(), engine)
    before = dst.read_raw().copy()
    dnnl.eltwise_forward(pd).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    stream.wait()
    _close(dst.to_numpy(), ref.eltwise_forward(alg, x, alpha, beta), np.maximum(1, np.abs(x)))
    # storage the logical tensor does not cover (gaps, block padding) is left as it was
    raw = dst.read_raw()
    covered = np.zeros(raw.size, bool)
    covered[pd.dst_desc().element_offsets().ravel()] = True
    np.testing.assert_array_equal(raw[~covered], before[~covered])

    dd = np.random.default_rng(3).standard_normal(dims).astype(np.float32)
    diff_md = d_md if d_spec != "any" else _md(dims, tag.any)
    bpd = dnnl.eltwise_backward.primitive_desc(engine, alg, diff_md, diff_md, s_md, alpha, beta,
                                               pd)
    ddm = dnnl.memory(bpd.diff_dst_desc(), engine, dd)
    dsm = dnnl.memory(bpd.diff_src_desc(), engine)
    dnnl.eltwise_backward(bpd).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DIFF_DST: ddm,
                                                dnnl.ARG_DIFF_SRC: dsm})
    stream.wait()
    _close(dsm.to_numpy(), ref.eltwise_backward(alg, dd, x, alpha, beta),
           np.abs(dd) * np.maximum(1, np.abs(x)))


def test_offset0_views(engine, stream):
    """A sub-memory view (offset0 > 0, gaps) as src and dst."""
    full = _md([4, 6], tag.ab)
    view = full.submemory_desc([2, 3], [1, 2])
    x = _x(11, "all", [4, 6])
    src = dnnl.memory(full, engine, x)
    dst = dnnl.memory(full, engine, np.zeros([4, 6], np.float32))
    pd = dnnl.eltwise_forward.primitive_desc(engine, FWD, A.eltwise_square, view, view)
    dnnl.eltwise_forward(pd).execute(stream, {dnnl.ARG_SRC: dnnl.memory(view, engine,
                                                                       src.buffer),
                                              dnnl.ARG_DST: dnnl.memory(view, engine,
                                                                       dst.buffer)})
    stream.wait()
    want = np.zeros([4, 6])
    want[1:3, 2:5] = x[1:3, 2:5].astype(np.float64) ** 2
    _close(dst.to_numpy(), want, 1.0)


# ---- in-place --------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["abcd", "nChw16c", "strided"])
def test_in_place(engine, stream, layout):
    alg = A.eltwise_logistic_use_dst_for_bwd
    md = _desc(layout, DIMS)
    x = _x(21, "all")
    y, _ = forward(engine, stream, alg, 0.0, 0.0, x, md, inplace=True)
    _close(y, ref.eltwise_forward(alg, x, 0, 0), 1.0)
    dd = np.random.default_rng(5).standard_normal(DIMS).astype(np.float32)
    dx, _ = backward(engine, stream, alg, 0.0, 0.0, y, dd, md, inplace=True)
    _close(dx, ref.eltwise_backward(alg, dd, y, 0, 0), np.abs(dd))


# ---- queries and call forms ------------------------------------------------------------------

def test_queries_and_call_forms(engine):
    md = _md(DIMS, "abcd")
    F = dnnl.eltwise_forward.primitive_desc
    pd = F(engine, dnnl.prop_kind.forward_inference, A.eltwise_linear, md, md, 2.0, -1.0)
    assert pd.get_algorithm() == A.eltwise_linear and pd.get_alpha() == 2.0
    assert pd.get_beta() == -1.0 and pd.get_prop_kind() == dnnl.prop_kind.forward_inference
    assert pd.src_desc() == md and pd.dst_desc() == md and pd.workspace_desc().is_zero()
    assert F(engine, FWD, A.eltwise_relu, md, md).get_alpha() == 0.0
    assert F(engine, FWD, A.eltwise_relu, md, md, 0.3).get_alpha() == pytest.approx(0.3)
    assert F(engine, FWD, A.eltwise_relu, md, md, 0.3, 0.0, None).get_alpha() == \
        pytest.approx(0.3)
    assert F(engine, FWD, A.eltwise_relu, md, md, dnnl.primitive_attr()).get_alpha() == 0.0
    kw = F(aengine=engine, prop_kind=FWD, algorithm=A.eltwise_clip, src_desc=md, dst_desc=md,
           beta=2.0)
    assert (kw.get_alpha(), kw.get_beta()) == (0.0, 2.0)

    B = dnnl.eltwise_backward.primitive_desc
    b = B(engine, A.eltwise_tanh_use_dst_for_bwd, md, md, md, pd)
    assert b.dst_desc() == md and b.src_desc().is_zero()  # dst is the data argument
    assert b.diff_src_desc() == md and b.diff_dst_desc() == md
    b = B(engine, A.eltwise_elu, md, md, md, 0.5, pd)
    assert b.get_alpha() == 0.5 and b.src_desc() == md and b.dst_desc().is_zero()
    b = B(engine, A.eltwise_clip_v2, md, md, md, -1.0, 1.0, pd, None)
    assert (b.get_alpha(), b.get_beta()) == (-1.0, 1.0)
    b = B(engine, A.eltwise_swish, md, md, md, 0.5)
    assert b.get_prop_kind() == dnnl.prop_kind.backward_data
    b = B(engine=engine, algorithm=A.eltwise_swish, diff_src_desc=md, diff_dst_desc=md,
          src_desc=md, alpha=1.5)
    assert b.get_alpha() == 1.5
    anyd = _md(DIMS, tag.any)
    nhwc = _md(DIMS, "acdb")
    b = B(engine, A.eltwise_relu, anyd, anyd, nhwc)
    assert b.diff_dst_desc() == nhwc and b.diff_src_desc() == nhwc
    b = B(engine, A.eltwise_relu, anyd, anyd, anyd,
          F(engine, FWD, A.eltwise_relu, nhwc, nhwc))
    assert b.src_desc() == nhwc and b.diff_src_desc() == nhwc


# ---- errors ----------------------------------------------------------------------------------

def test_bad_descriptors(engine):
    md = _md(DIMS, "abcd")
    F = dnnl.eltwise_forward.primitive_desc
    B = dnnl.eltwise_backward.primitive_desc
    bad = [
        (lambda: F(engine, FWD, A.convolution_direct, md, md), dnnl.invalid_arguments,
         "algorithm"),
        (lambda: F(engine, FWD, 12345, md, md), dnnl.invalid_arguments, "algorithm"),
        (lambda: F(engine, dnnl.prop_kind.backward_data, A.eltwise_relu, md, md),
         dnnl.invalid_arguments, "prop_kind"),
        (lambda: F(engine, FWD, A.eltwise_clip, md, md, 1.0, 0.5), dnnl.invalid_arguments,
         "beta >= alpha"),
        (lambda: F(engine, FWD, A.eltwise_relu_use_dst_for_bwd, md, md, -0.1),
         dnnl.invalid_arguments, "alpha >= 0"),
        (lambda: F(engine, FWD, A.eltwise_relu, _md(DIMS, tag.any), md),
         dnnl.invalid_arguments, "src_desc"),
        (lambda: F(engine, FWD, A.eltwise_relu, md, _md([2, 3, 4, 6], "abcd")),
         dnnl.invalid_arguments, "dims"),
        (lambda: F(engine, FWD, A.eltwise_relu, dnnl.memory.desc(DIMS, dt.s8, "abcd"),
                   dnnl.memory.desc(DIMS, dt.s8, "abcd")), dnnl.unimplemented, "s8"),
        (lambda: F(engine, FWD, A.eltwise_relu, md, md, "0.1"), dnnl.invalid_arguments,
         "alpha"),
        (lambda: B(engine, A.eltwise_round, md, md, md), dnnl.invalid_arguments, "round"),
        (lambda: B(engine, A.eltwise_relu, md, _md([2, 3, 4, 6], "abcd"), md),
         dnnl.invalid_arguments, "diff_dst_desc"),
        (lambda: B(engine, A.eltwise_relu, md, md, md, 0.0, 0.0, "pd"),
         dnnl.invalid_arguments, "hint_fwd_pd"),
    ]
    for make, err, words in bad:
        with pytest.raises(err, match=words):
            make()
    attr = dnnl.primitive_attr()
    ops = dnnl.post_ops()
    ops.append_eltwise(A.eltwise_relu, 0.0, 0.0)
    attr.set_post_ops(ops)
    with pytest.raises(dnnl.unimplemented, match="post-ops"):
        F(engine, FWD, A.eltwise_relu, md, md, 0.0, 0.0, attr)


def test_bad_execute_leaves_outputs_untouched(engine, stream):
    md = _md(DIMS, "abcd")
    pd = dnnl.eltwise_forward.primitive_desc(engine, FWD, A.eltwise_exp, md, md)
    prim = dnnl.eltwise_forward(pd)
    x = _x(1, "all")
    src = dnnl.memory(md, engine, x)
    sentinel = np.full(DIMS, -7.0, np.float32)
    dst = dnnl.memory(md, engine, sentinel)
    wrong = dnnl.memory(_md(DIMS, "acdb"), engine, x)
    with pytest.raises(dnnl.invalid_arguments, match="desc"):
        prim.execute(stream, {dnnl.ARG_SRC: wrong, dnnl.ARG_DST: dst})
    with pytest.raises(dnnl.invalid_arguments, match="missing"):
        prim.execute(stream, {dnnl.ARG_DST: dst})
    stream.wait()
    np.testing.assert_array_equal(dst.to_numpy(), sentinel)
    # in-place through one buffer seen with two different descs is refused
    pd2 = dnnl.eltwise_forward.primitive_desc(engine, FWD, A.eltwise_exp, md,
                                              _md(DIMS, "acdb"))
    same = dnnl.memory(_md(DIMS, "acdb"), engine, src.buffer)
    with pytest.raises(dnnl.invalid_arguments, match="in-place"):
        dnnl.eltwise_forward(pd2).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: same})
    stream.wait()
    np.testing.assert_array_equal(src.to_numpy(), x)
    # backward of a use_dst algorithm takes ARG_DST, not ARG_SRC
    bpd = dnnl.eltwise_backward.primitive_desc(engine, A.eltwise_exp_use_dst_for_bwd, md, md,
                                               md)
    ds = dnnl.memory(md, engine, sentinel)
    with pytest.raises(dnnl.invalid_arguments, match="ARG_SRC|SRC"):
        dnnl.eltwise_backward(bpd).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DIFF_DST: src,
                                                    dnnl.ARG_DIFF_SRC: ds})
    stream.wait()
    np.testing.assert_array_equal(ds.to_numpy(), sentinel)


# ---- bf16 and f16 ----------------------------------------------------------------------------
# Inputs are rounded to the type first (the values the kernel reads); the float64 reference of
# those values, rounded once to the output type, is within EPS (unit roundoff: bf16 2^-8, f16
# 2^-11) of it relatively; the kernel's f32 arithmetic adds errors of a few 2^-24. Tolerance:
# 2 * EPS * |ref| + 1e-5 * max(1, |ref|) (the f32 formulas' error, as in the f32 tests), plus
# f16's subnormal spacing 2^-24.
EPS = {dt.bf16: 2.0 ** -8, dt.f16: 2.0 ** -11, dt.f32: 2.0 ** -24}
LOW = [  # (algorithm, alpha, beta, domain, data type per buffer, src layout)
    (A.eltwise_relu, 0.1, 0.0, "all", (dt.bf16, dt.bf16), "abcd"),
    (A.eltwise_gelu_erf, 0.0, 0.0, "all", (dt.bf16, dt.bf16), "nChw16c"),
    (A.eltwise_tanh, 0.0, 0.0, "all", (dt.f16, dt.f16), "abcd"),
    (A.eltwise_logistic_use_dst_for_bwd, 0.0, 0.0, "all", (dt.f16, dt.f16), "acdb"),
    (A.eltwise_exp, 0.0, 0.0, "all", (dt.bf16, dt.f32), "abcd"),
    (A.eltwise_sqrt, 0.0, 0.0, "pos", (dt.f32, dt.f16), "abcd"),
    (A.eltwise_swish, 1.5, 0.0, "all", (dt.f16, dt.bf16), "strided"),
]
LOW_IDS = [f"{a.name[8:]}-{s.name}-{d.name}-{t}" for a, _, _, _, (s, d), t in LOW]


def _low_close(got, want, dtype):
    got = np.asarray(got, np.float64)
    mag = np.abs(want)
    tol = 2 * EPS[dtype] * mag + 1e-5 * np.maximum(1, mag) + (2.0 ** -24 if dtype == dt.f16
                                                               else 0.0)
    bad = np.abs(got - want) > tol
    assert not bad.any(), (f"{bad.sum()} of {bad.size} differ; got {got[bad][:4]}, want "
                           f"{want[bad][:4]}")


@pytest.mark.parametrize("case", range(len(LOW)), ids=LOW_IDS)
def test_bf16_f16_forward_and_backward(engine, stream, case):
    alg, alpha, beta, domain, (sdt, ddt), layout = LOW[case]
    dims = [2, 16, 3, 5]
    x = _x(300 + case, domain, dims)

    def md(t, d):
        m = _strided_md(dims) if layout == "strided" else _md(dims, layout)
        return m.with_data_type(t) if d is None else dnnl.memory.desc(dims, t, d)

    s_md = md(sdt, None)
    pd = dnnl.eltwise_forward.primitive_desc(engine, FWD, alg, s_md,
                                             dnnl.memory.desc(dims, ddt, tag.any), alpha, beta)
    assert pd.dst_desc().data_type == ddt
    src = dnnl.memory(s_md, engine, x)
    xs = src.to_numpy().astype(np.float64)  # the inputs as stored
    dst = dnnl.memory(pd.dst_desc(), engine)
    dnnl.eltwise_forward(pd).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    stream.wait()
    y = dst.to_numpy()
    _low_close(y, ref.eltwise_forward(alg, xs, alpha, beta), ddt)

    # backward: diff tensors of the dst type, data as the forward used it
    dd = np.random.default_rng(case).standard_normal(dims).astype(np.float32)
    data = dst if alg in USES_DST else src
    v = y.astype(np.float64) if alg in USES_DST else xs
    diff = dnnl.memory.desc(dims, ddt, tag.any)
    bpd = dnnl.eltwise_backward.primitive_desc(engine, alg, diff, diff, data.get_desc(), alpha,
                                               beta, pd)
    assert bpd.diff_src_desc().data_type == ddt
    ddm = dnnl.memory(bpd.diff_dst_desc(), engine, dd)
    dds = ddm.to_numpy().astype(np.float64)
    dsm = dnnl.memory(bpd.diff_src_desc(), engine)
    arg = dnnl.ARG_DST if alg in USES_DST else dnnl.ARG_SRC
    dnnl.eltwise_backward(bpd).execute(stream, {arg: data, dnnl.ARG_DIFF_DST: ddm,
                                                dnnl.ARG_DIFF_SRC: dsm})
    stream.wait()
    _low_close(dsm.to_numpy(), ref.eltwise_backward(alg, dds, v, alpha, beta), ddt)


def test_bf16_rounding_is_to_nearest_even(engine, stream):
    """Values halfway between two bf16 / f16 numbers round to the even one, as oneDNN's."""
    for t, ulp in ((dt.bf16, 2.0 ** -7), (dt.f16, 2.0 ** -10)):
        # 1 + k ulp + half an ulp: ties, exact in f32 (linear with alpha 1 passes them)
        k = np.arange(16, dtype=np.float64)
        x = (1 + k * ulp + ulp / 2).astype(np.float32).reshape(1, 16)
        src_md = dnnl.memory.desc([1, 16], dt.f32, "ab")
        pd = dnnl.eltwise_forward.primitive_desc(engine, FWD, A.eltwise_linear, src_md,
                                                 dnnl.memory.desc([1, 16], t, "ab"), 1.0, 0.0)
        src = dnnl.memory(src_md, engine, x)
        dst = dnnl.memory(pd.dst_desc(), engine)
        dnnl.eltwise_forward(pd).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
        stream.wait()
        even = 1 + (k + (k % 2)) * ulp  # the tie goes to the even mantissa
        np.testing.assert_array_equal(dst.to_numpy().astype(np.float64).ravel(), even)
