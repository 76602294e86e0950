"""The batch normalization primitives against the float64 numpy reference (its backward
checked by central finite differences), ONNX's BatchNormalization (opset 15, inference with
given statistics and training mode), every flag combination, plain / channels-last /
blocked / ``any`` layouts, and errors that name the argument and leave outputs untouched."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference import normalization as R

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
F = dnnl.normalization_flags
PK = dnnl.prop_kind
EPS = 1e-3

# every combination of the four flags
FLAG_SETS = [F(sum(c)) for n in range(5) for c in itertools.combinations(
    (F.use_global_stats, F.use_scale, F.use_shift, F.fuse_norm_relu), n)]


def _data(dims, seed=0):
    rng = np.random.default_rng(seed)
    C = dims[1]
    return dict(x=(rng.standard_normal(dims) * 1.5 + 0.7).astype(np.float32),
                dy=rng.standard_normal(dims).astype(np.float32),
                scale=rng.uniform(0.5, 1.5, C).astype(np.float32),
                shift=rng.standard_normal(C).astype(np.float32),
                mean=rng.standard_normal(C).astype(np.float32) * 0.3 + 0.7,
                var=rng.uniform(1.0, 3.0, C).astype(np.float32))


def _mem(md, eng, v=None):
    return dnnl.memory(md, eng, v) if v is not None else dnnl.memory(md, eng)


def _forward(eng, s, d, md, prop, flags, dst_md=None):
    pd = dnnl.batch_normalization_forward.primitive_desc(eng, prop, md, dst_md or md, EPS,
                                                         flags)
    args = {dnnl.ARG_SRC: _mem(pd.src_desc(), eng, d["x"]),
            dnnl.ARG_DST: _mem(pd.dst_desc(), eng)}
    g = bool(flags & F.use_global_stats)
    if not pd.mean_desc().is_zero():
        args[dnnl.ARG_MEAN] = _mem(pd.mean_desc(), eng, d["mean"] if g else None)
        args[dnnl.ARG_VARIANCE] = _mem(pd.variance_desc(), eng, d["var"] if g else None)
    if flags & F.use_scale:
        args[dnnl.ARG_SCALE] = _mem(pd.weights_desc(), eng, d["scale"])
    if flags & F.use_shift:
        args[dnnl.ARG_SHIFT] = _mem(pd.weights_desc(), eng, d["shift"])
    if not pd.workspace_desc().is_zero():
        args[dnnl.ARG_WORKSPACE] = _mem(pd.workspace_desc(), eng)
    dnnl.batch_normalization_forward(pd).execute(s, args)
    s.wait()
    return pd, args


def _close(got, want, tol=2e-5):
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


LAYOUTS = {"nc": ([6, 5], "ab"), "ncw": ([3, 4, 7], "abc"), "nwc": ([3, 4, 7], "acb"),
           "nchw": ([2, 5, 3, 4], "abcd"), "nhwc": ([2, 5, 3, 4], "acdb"),
           "nChw8c": ([2, 11, 3, 3], "aBcd8b"), "ncdhw": ([2, 3, 2, 3, 2], "abcde"),
           "ndhwc": ([2, 3, 2, 3, 2], "acdeb"), "cn": ([5, 6], "ba")}


@pytest.mark.sampled(every=5)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("flags", FLAG_SETS, ids=lambda f: f"f{int(f)}")
def test_forward_training_and_backward_match_reference(engine, stream, layout, flags):
    dims, t = LAYOUTS[layout]
    d = _data(dims, seed=len(layout) + int(flags))
    md = dnnl.memory.desc(dims, dt.f32, t)
    g, relu = bool(flags & F.use_global_stats), bool(flags & F.fuse_norm_relu)
    sc = d["scale"] if flags & F.use_scale else None
    sh = d["shift"] if flags & F.use_shift else None
    pd, a = _forward(engine, stream, d, md, PK.forward_training, flags)
    y, m, v = R.batch_norm_forward(d["x"], EPS, d["mean"] if g else None,
                                   d["var"] if g else None, sc, sh, relu)
    _close(a[dnnl.ARG_DST].to_numpy(), y)
    if not g:
        _close(a[dnnl.ARG_MEAN].to_numpy(), m)
        _close(a[dnnl.ARG_VARIANCE].to_numpy(), v)
    mask = None
    if relu:
        ws = a[dnnl.ARG_WORKSPACE].to_numpy()
        mask = ws[:y.size].reshape(y.shape) != 0
        np.testing.assert_array_equal(mask, y > 0)
    mean, var = a[dnnl.ARG_MEAN].to_numpy(), a[dnnl.ARG_VARIANCE].to_numpy()
    for prop in (PK.backward, PK.backward_data):
        bpd = dnnl.batch_normalization_backward.primitive_desc(engine, prop, md, md, md, EPS,
                                                               flags, pd)
        b = {dnnl.ARG_SRC: a[dnnl.ARG_SRC], dnnl.ARG_MEAN: a[dnnl.ARG_MEAN],
             dnnl.ARG_VARIANCE: a[dnnl.ARG_VARIANCE],
             dnnl.ARG_DIFF_DST: _mem(md, engine, d["dy"]), dnnl.ARG_DIFF_SRC: _mem(md, engine)}
        for k in (dnnl.ARG_SCALE, dnnl.ARG_SHIFT, dnnl.ARG_WORKSPACE):
            if k in bpd.arg_specs():
                b[k] = a[k]
        for k in (dnnl.ARG_DIFF_SCALE, dnnl.ARG_DIFF_SHIFT):
            if k in bpd.arg_specs():
                b[k] = _mem(bpd.diff_weights_desc(), engine)
        dnnl.batch_normalization_backward(bpd).execute(stream, b)
        stream.wait()
        dx, dsc, dsh = R.batch_norm_backward(d["x"], d["dy"], mean, var, EPS, sc, g, mask)
        _close(b[dnnl.ARG_DIFF_SRC].to_numpy(), dx)
        if prop == PK.backward and flags & F.use_scale:
            _close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc)
        if prop == PK.backward and flags & F.use_shift:
            _close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), dsh)
        assert (dnnl.ARG_DIFF_SCALE in b) == (prop == PK.backward and bool(flags & F.use_scale))


@pytest.mark.parametrize("flags", [F.none, F.use_global_stats | F.use_scale | F.use_shift,
                                   F.fuse_norm_relu | F.use_shift])
def test_forward_inference(engine, stream, flags):
    dims = [3, 4, 5, 2]
    d = _data(dims, 7)
    md = dnnl.memory.desc(dims, dt.f32, tag.nchw)
    pd, a = _forward(engine, stream, d, md, PK.forward_inference, flags)
    g = bool(flags & F.use_global_stats)
    # oneDNN: computed statistics are not exposed in inference; no workspace either
    assert pd.mean_desc().is_zero() == (not g)
    assert pd.workspace_desc().is_zero()
    y, _, _ = R.batch_norm_forward(d["x"], EPS, d["mean"] if g else None,
                                   d["var"] if g else None,
                                   d["scale"] if flags & F.use_scale else None,
                                   d["shift"] if flags & F.use_shift else None,
                                   bool(flags & F.fuse_norm_relu))
    _close(a[dnnl.ARG_DST].to_numpy(), y)


def test_any_dst_follows_src_and_queries(cpu_engine):
    src = dnnl.memory.desc([2, 16, 3, 3], dt.f32, tag.nhwc)
    anyd = dnnl.memory.desc([2, 16, 3, 3], dt.f32, tag.any)
    flags = F.use_scale | F.use_shift | F.fuse_norm_relu
    pd = dnnl.batch_normalization_forward.primitive_desc(
        cpu_engine, PK.forward_training, src_desc=src, dst_desc=anyd, epsilon=0.5, flags=flags)
    assert pd.dst_desc() == src
    assert pd.get_epsilon() == 0.5 and pd.get_flags() == flags
    assert pd.get_prop_kind() == PK.forward_training
    assert pd.mean_desc() == dnnl.memory.desc([16], dt.f32, tag.a)
    assert pd.query_md(dnnl.query.dst_md, 1) == pd.mean_desc()
    assert pd.weights_desc() == dnnl.memory.desc([16], dt.f32, tag.a)
    assert pd.workspace_desc().get_data_type() == dt.u8
    assert pd.query_md(dnnl.query.exec_arg_md, dnnl.ARG_VARIANCE) == pd.variance_desc()
    bpd = dnnl.batch_normalization_backward.primitive_desc(
        cpu_engine, PK.backward, anyd, anyd, anyd, 0.5, flags, pd)
    assert bpd.diff_src_desc() == src and bpd.diff_dst_desc() == src and bpd.src_desc() == src
    assert bpd.diff_weights_desc() == pd.weights_desc()
    assert bpd.workspace_desc() == pd.workspace_desc()


def _fd_check(x, dy, scale, shift, flags, mean=None, var=None):
    """Central differences of sum(dy * f) through the float64 reference forward."""
    g = bool(flags & F.use_global_stats)
    relu = bool(flags & F.fuse_norm_relu)

    def loss(xv, sv, hv):
        y, _, _ = R.batch_norm_forward(xv, EPS, mean if g else None, var if g else None,
                                       sv if flags & F.use_scale else None,
                                       hv if flags & F.use_shift else None, relu)
        return float((dy * y).sum())

    h = 1e-6
    num = []
    for arr_i in range(3):
        arrs = [x.astype(np.float64).copy(), scale.astype(np.float64).copy(),
                shift.astype(np.float64).copy()]
        grad = np.zeros_like(arrs[arr_i])
        for idx in np.ndindex(*arrs[arr_i].shape):
            p = [a.copy() for a in arrs]
            p[arr_i][idx] += h
            m = [a.copy() for a in arrs]
            m[arr_i][idx] -= h
            grad[idx] = (loss(*p) - loss(*m)) / (2 * h)
        num.append(grad)
    return num


@pytest.mark.parametrize("flags", [F.use_scale | F.use_shift,
                                   F.use_global_stats | F.use_scale | F.use_shift,
                                   F.use_scale | F.use_shift | F.fuse_norm_relu, F.none])
def test_backward_matches_finite_differences(engine, stream, flags):
    dims = [2, 3, 2, 2]
    d = _data(dims, 11)
    md = dnnl.memory.desc(dims, dt.f32, tag.nchw)
    pd, a = _forward(engine, stream, d, md, PK.forward_training, flags)
    bpd = dnnl.batch_normalization_backward.primitive_desc(engine, PK.backward, md, md, md,
                                                           EPS, flags, pd)
    b = {k: a[k] for k in (dnnl.ARG_SRC, dnnl.ARG_MEAN, dnnl.ARG_VARIANCE, dnnl.ARG_SCALE,
                           dnnl.ARG_SHIFT, dnnl.ARG_WORKSPACE) if k in bpd.arg_specs()}
    b[dnnl.ARG_DIFF_DST] = _mem(md, engine, d["dy"])
    b[dnnl.ARG_DIFF_SRC] = _mem(md, engine)
    for k in (dnnl.ARG_DIFF_SCALE, dnnl.ARG_DIFF_SHIFT):
        if k in bpd.arg_specs():
            b[k] = _mem(bpd.diff_weights_desc(), engine)
    dnnl.batch_normalization_backward(bpd).execute(stream, b)
    stream.wait()
    gx, gs, gh = _fd_check(d["x"], d["dy"].astype(np.float64), d["scale"], d["shift"], flags,
                           d["mean"], d["var"])
    tol = 2e-4
    _close(b[dnnl.ARG_DIFF_SRC].to_numpy(), gx, tol)
    if flags & F.use_scale:
        _close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), gs, tol)
    if flags & F.use_shift:
        _close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), gh, tol)


def _onnx_bn(x, scale, b, mean, var, training):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    C = x.shape[1]
    outs = ["Y", "RM", "RV"] if training else ["Y"]
    node = helper.make_node("BatchNormalization", ["X", "S", "B", "M", "V"], outs,
                            epsilon=EPS, momentum=0.0, training_mode=int(training))
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [node], "bn", [vi("X", TensorProto.FLOAT, x.shape)] + [
            vi(n, TensorProto.FLOAT, (C,)) for n in "SBMV"],
        [vi(o, TensorProto.FLOAT, x.shape if o == "Y" else (C,)) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    onnx.checker.check_model(model)
    res = ReferenceEvaluator(model).run(None, {"X": x, "S": scale, "B": b, "M": mean, "V": var})
    return res


@pytest.mark.parametrize("training", [False, True])
def test_matches_onnx_batch_normalization(engine, stream, training):
    dims = [3, 4, 5, 3]
    d = _data(dims, 5)
    md = dnnl.memory.desc(dims, dt.f32, tag.nchw)
    flags = F.use_scale | F.use_shift | (F.none if training else F.use_global_stats)
    prop = PK.forward_training if training else PK.forward_inference
    _, a = _forward(engine, stream, d, md, prop, flags)
    res = _onnx_bn(d["x"], d["scale"], d["shift"], d["mean"], d["var"], training)
    _close(a[dnnl.ARG_DST].to_numpy(), res[0])
    if training:  # momentum 0: the running statistics are the batch's (ONNX: biased var)
        _close(a[dnnl.ARG_MEAN].to_numpy(), res[1])
        _close(a[dnnl.ARG_VARIANCE].to_numpy(), res[2])


def test_in_place(cpu_engine):
    eng, s = cpu_engine, dnnl.stream(cpu_engine)
    d = _data([2, 3, 4, 4], 2)
    md = dnnl.memory.desc([2, 3, 4, 4], dt.f32, tag.nchw)
    pd = dnnl.batch_normalization_forward.primitive_desc(eng, PK.forward_inference, md, md,
                                                         EPS, F.none)
    m = _mem(md, eng, d["x"])
    dnnl.batch_normalization_forward(pd).execute(s, {dnnl.ARG_SRC: m, dnnl.ARG_DST: m})
    s.wait()
    _close(m.to_numpy(), R.batch_norm_forward(d["x"], EPS)[0])


def test_bad_arguments_name_them(cpu_engine):
    eng = cpu_engine
    md = dnnl.memory.desc([2, 3, 4], dt.f32, tag.abc)
    P = dnnl.batch_normalization_forward.primitive_desc
    with pytest.raises(dnnl.invalid_arguments, match="aprop_kind must be forward_training"):
        P(eng, PK.backward, md, md, EPS, F.none)
    with pytest.raises(dnnl.invalid_arguments, match=r"dst_desc dims \[2, 3, 5\] must equal"):
        P(eng, PK.forward_training, md, dnnl.memory.desc([2, 3, 5], dt.f32, tag.abc), EPS, 0)
    with pytest.raises(dnnl.invalid_arguments, match="src_desc must have a concrete layout"):
        P(eng, PK.forward_training, dnnl.memory.desc([2, 3, 4], dt.f32, tag.any), md, EPS, 0)
    with pytest.raises(dnnl.invalid_arguments, match="flags 0x40 has bits"):
        P(eng, PK.forward_training, md, md, EPS, 0x40)
    # fuse_norm_add_relu (0x10) is implemented: src_1 takes dst's desc (oneDNN's dst_md(3))
    assert P(eng, PK.forward_training, md, md, EPS, 0x10).dst_desc(3) == md
    with pytest.raises(dnnl.unimplemented, match="src_desc data type s8; only f32, bf16 and "
                                                 "f16 are implemented"):
        P(eng, PK.forward_training, dnnl.memory.desc([2, 3, 4], dt.s8, tag.abc), md, EPS, 0)
    with pytest.raises(dnnl.invalid_arguments, match="epsilon must be a finite number"):
        P(eng, PK.forward_training, md, md, -1.0, 0)
    with pytest.raises(dnnl.invalid_arguments, match="at least 2 dimensions"):
        P(eng, PK.forward_training, dnnl.memory.desc([3], dt.f32, tag.a),
          dnnl.memory.desc([3], dt.f32, tag.a), EPS, 0)
    attr = dnnl.primitive_attr()
    po = dnnl.post_ops()
    po.append_eltwise(dnnl.algorithm.eltwise_relu, 0.0, 0.0)
    attr.set_post_ops(po)
    with pytest.raises(dnnl.unimplemented, match="post-ops"):
        P(eng, PK.forward_training, md, md, EPS, 0, attr)
    fwd = P(eng, PK.forward_training, md, md, EPS, F.none)
    B = dnnl.batch_normalization_backward.primitive_desc
    with pytest.raises(dnnl.invalid_arguments, match="aprop_kind must be backward"):
        B(eng, PK.forward_training, md, md, md, EPS, 0, fwd)
    with pytest.raises(dnnl.invalid_arguments, match="hint_fwd_pd has no workspace"):
        B(eng, PK.backward, md, md, md, EPS, F.fuse_norm_relu, fwd)
    with pytest.raises(dnnl.invalid_arguments, match="hint_fwd_pd"):
        B(eng, PK.backward, md, md, md, EPS, 0, None)


def test_execute_errors_leave_outputs_untouched(cpu_engine):
    eng, s = cpu_engine, dnnl.stream(cpu_engine)
    md = dnnl.memory.desc([2, 3, 4], dt.f32, tag.abc)
    pd = dnnl.batch_normalization_forward.primitive_desc(eng, PK.forward_training, md, md, EPS,
                                                         F.use_scale)
    x = np.ones((2, 3, 4), np.float32)
    dst = _mem(md, eng, np.full((2, 3, 4), 7.0, np.float32))
    mean = _mem(pd.mean_desc(), eng, np.full(3, 7.0, np.float32))
    var = _mem(pd.variance_desc(), eng, np.full(3, 7.0, np.float32))
    args = {dnnl.ARG_SRC: _mem(md, eng, x), dnnl.ARG_DST: dst, dnnl.ARG_MEAN: mean,
            dnnl.ARG_VARIANCE: var}
    prim = dnnl.batch_normalization_forward(pd)
    with pytest.raises(dnnl.invalid_arguments, match="missing argument ARG_SCALE"):
        prim.execute(s, args)
    with pytest.raises(dnnl.invalid_arguments, match="ARG_SCALE has desc"):
        prim.execute(s, {**args, dnnl.ARG_SCALE: _mem(dnnl.memory.desc([4], dt.f32, tag.a),
                                                      eng)})
    s.wait()
    assert (dst.to_numpy() == 7).all() and (mean.to_numpy() == 7).all()
    assert (var.to_numpy() == 7).all()


# -- bf16 / f16 data -------------------------------------------------------------------------
# Data in bf16/f16, statistics, scale and shift in f32 (oneDNN's rule). The kernels compute
# in f32 and round dst / diff_src once on store (nearest even): within one rounding (unit
# roundoff u = 2^-9 for bf16, 2^-12 for f16) of the float64 reference on the inputs as
# stored; the bound allows 2u relative plus 2e-5 of the largest value for the f32
# arithmetic. Statistics and parameter gradients are f32 outputs: the f32 tolerance.
UNIT = {"bf16": 2.0 ** -9, "f16": 2.0 ** -12}


def _low_close(got, want, kind):
    bound = 2 * UNIT[kind] * np.abs(want) + 2e-5 * max(1.0, np.abs(want).max())
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) - bound))


@pytest.mark.sampled(every=5)
@pytest.mark.parametrize("kind", ["bf16", "f16"])
@pytest.mark.parametrize("dims,t", [([2, 5, 3, 4], "abcd"), ([4, 3, 40, 40], "acdb"),
                                    ([2, 11, 3, 3], "aBcd8b")], ids=["nchw", "nhwc", "nChw8c"])
@pytest.mark.parametrize("flags", [F.none, F.use_scale | F.use_shift | F.fuse_norm_relu,
                                   F.use_global_stats | F.use_scale],
                         ids=lambda f: f"f{int(f)}")
def test_bf16_f16_match_reference_of_stored_inputs(engine, stream, kind, dims, t, flags):
    d = _data(dims, seed=int(flags))
    md = dnnl.memory.desc(dims, dt[kind], t)
    g, relu = bool(flags & F.use_global_stats), bool(flags & F.fuse_norm_relu)
    sc = d["scale"] if flags & F.use_scale else None
    sh = d["shift"] if flags & F.use_shift else None
    pd, a = _forward(engine, stream, d, md, PK.forward_training, flags,
                     dst_md=dnnl.memory.desc(dims, dt[kind], tag.any))
    assert pd.dst_desc() == md and pd.mean_desc().get_data_type() == dt.f32
    xs = a[dnnl.ARG_SRC].to_numpy().astype(np.float64)   # the input as stored
    y, m, v = R.batch_norm_forward(xs, EPS, d["mean"] if g else None, d["var"] if g else None,
                                   sc, sh, relu)
    _low_close(a[dnnl.ARG_DST].to_numpy().astype(np.float64), y, kind)
    if not g:
        _close(a[dnnl.ARG_MEAN].to_numpy(), m)
        _close(a[dnnl.ARG_VARIANCE].to_numpy(), v)
    bpd = dnnl.batch_normalization_backward.primitive_desc(
        engine, PK.backward, dnnl.memory.desc(dims, dt[kind], tag.any),
        dnnl.memory.desc(dims, dt[kind], tag.any), md, EPS, flags, pd)
    assert bpd.diff_src_desc() == md
    b = {k: a[k] for k in (dnnl.ARG_SRC, dnnl.ARG_MEAN, dnnl.ARG_VARIANCE, dnnl.ARG_SCALE,
                           dnnl.ARG_WORKSPACE) if k in a}
    b[dnnl.ARG_DIFF_DST] = _mem(bpd.diff_dst_desc(), engine, d["dy"])
    b[dnnl.ARG_DIFF_SRC] = _mem(bpd.diff_src_desc(), engine)
    for k in (dnnl.ARG_DIFF_SCALE, dnnl.ARG_DIFF_SHIFT):
        if k in bpd.arg_specs():
            b[k] = _mem(bpd.diff_weights_desc(), engine)
    dnnl.batch_normalization_backward(bpd).execute(stream, b)
    stream.wait()
    dys = b[dnnl.ARG_DIFF_DST].to_numpy().astype(np.float64)
    mask = None
    if relu:
        mask = a[dnnl.ARG_WORKSPACE].to_numpy()[:y.size].reshape(y.shape) != 0
        np.testing.assert_array_equal(mask, a[dnnl.ARG_DST].to_numpy() > 0)
    dx, dsc, dsh = R.batch_norm_backward(xs, dys, a[dnnl.ARG_MEAN].to_numpy(),
                                         a[dnnl.ARG_VARIANCE].to_numpy(), EPS, sc, g, mask)
    _low_close(b[dnnl.ARG_DIFF_SRC].to_numpy().astype(np.float64), dx, kind)
    if dnnl.ARG_DIFF_SCALE in b:
        _close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc, 1e-4)


@pytest.mark.parametrize("layout", ["ncw", "nchw"])
@pytest.mark.parametrize("flags", [F.use_scale | F.use_shift | F.fuse_norm_relu, F.none])
def test_local_tree_reduction_matches_reference(engine, stream, monkeypatch, layout, flags):
    """The GPU choice of the channel reduction (lanes summed in local memory, one partial per
    work-group), forced on the CPU device."""
    from pydnnl.runtime.heuristics import normalization as rules
    monkeypatch.setattr(rules, "bn_reduce_tree", lambda info, lanes: lanes == "r")
    dims, t = LAYOUTS[layout]
    md = dnnl.memory.desc(dims, dt.f32, t)
    pd = dnnl.batch_normalization_forward.primitive_desc(engine, PK.forward_training, md, md,
                                                         EPS, flags)
    assert pd.tree and pd.lanes == "r"
    test_forward_training_and_backward_match_reference(engine, stream, layout, flags)


def test_fused_rule_closed_form():
    """runtime/heuristics/normalization.py ``bn_fused`` on made-up devices: CPUs run a channel
    per work-group (one SIMD vector, sub-group sums where Intel's extension is there) when
    every core gets a channel, the channel fits a few times the cache, and its run fills a
    vector; GPUs never."""
    from pydnnl.engine import DeviceInfo
    from pydnnl.runtime.heuristics.normalization import bn_fused

    def info(kind, ext=()):
        return DeviceInfo(name="made-up", vendor="v", platform="p", driver_version="1",
                          device_version="OpenCL 3.0", type=kind, compute_units=2,
                          global_mem_bytes=1 << 34, local_mem_bytes=1 << 16,
                          max_work_group_size=1024, max_clock_mhz=0, fp16=True, fp64=True,
                          preferred_float_vector_width=1, simd_width=16,
                          global_mem_cache_bytes=1 << 20, extensions=ext)

    cpu = info("cpu", ("cl_intel_required_subgroup_size",))
    assert bn_fused(cpu, 64, 1 << 20, 16384) == (True, 16, True)
    assert bn_fused(info("cpu"), 64, 1 << 20, 16384) == (True, 16, False)
    assert not bn_fused(cpu, 64, 8 << 20, 16384)[0]      # a channel far beyond the cache
    assert not bn_fused(cpu, 1, 1 << 20, 16384)[0]       # one core idle
    assert not bn_fused(cpu, 64, 1 << 20, 8)[0]          # runs shorter than a vector
    assert not bn_fused(cpu, 64, 1 << 20, 0)[0]          # channels innermost or blocked
    assert not bn_fused(info("gpu"), 64, 1 << 20, 16384)[0]


@pytest.mark.parametrize("flags", [0, 0x6, 0xE])
def test_fused_channel_kernel_matches_reference(cpu_engine, flags):
    """The one-kernel-per-channel path (CPU, nchw) on runs with an unrolled part, a plain step
    and a tail (lanes of 16 over 7 x 9 = 63 values), forward training and backward."""
    import pydnnl as dnnl
    from pydnnl.reference import normalization as R

    eng = cpu_engine  # the fused path is the CPU's
    s = dnnl.stream(eng)
    rng = np.random.default_rng(5)
    dims, C, eps = [3, 4, 7, 9], 4, 1e-3
    x = (rng.standard_normal(dims) + 3.0).astype(np.float32)
    dy = rng.standard_normal(dims).astype(np.float32)
    sc, sh = rng.uniform(0.5, 1.5, C).astype(np.float32), rng.standard_normal(C).astype(np.float32)
    md = dnnl.memory.desc(dims, dnnl.memory.data_type.f32, "abcd")
    pd = dnnl.batch_normalization_forward.primitive_desc(
        eng, dnnl.prop_kind.forward_training, md, md, eps, flags)
    if "fused" not in pd.impl_info_str():
        pytest.skip("this device's rule keeps the reduction kernels")
    m = lambda d, v=None: dnnl.memory(d, eng, v) if v is not None else dnnl.memory(d, eng)  # noqa: E731
    a = {dnnl.ARG_SRC: m(md, x), dnnl.ARG_DST: m(md), dnnl.ARG_MEAN: m(pd.mean_desc()),
         dnnl.ARG_VARIANCE: m(pd.variance_desc())}
    if flags & 0x2:
        a[dnnl.ARG_SCALE] = m(pd.weights_desc(), sc)
    if flags & 0x4:
        a[dnnl.ARG_SHIFT] = m(pd.weights_desc(), sh)
    relu = bool(flags & 0x8)
    if relu:
        a[dnnl.ARG_WORKSPACE] = m(pd.workspace_desc())
    dnnl.batch_normalization_forward(pd).execute(s, a)
    s.wait()
    y, mean, var = R.batch_norm_forward(x.astype(np.float64), eps, None, None,
                                        sc if flags & 0x2 else None,
                                        sh if flags & 0x4 else None, relu)
    _close(a[dnnl.ARG_DST].to_numpy(), y)
    _close(a[dnnl.ARG_MEAN].to_numpy(), mean)
    _close(a[dnnl.ARG_VARIANCE].to_numpy(), var)
    bpd = dnnl.batch_normalization_backward.primitive_desc(
        eng, dnnl.prop_kind.backward, md, md, md, eps, flags, pd)
    assert "fused" in bpd.impl_info_str()
    b = {k: v for k, v in a.items() if k != dnnl.ARG_DST}
    b[dnnl.ARG_DIFF_DST], b[dnnl.ARG_DIFF_SRC] = m(md, dy), m(md)
    if flags & 0x2:
        b[dnnl.ARG_DIFF_SCALE] = m(bpd.diff_weights_desc())
    if flags & 0x4:
        b[dnnl.ARG_DIFF_SHIFT] = m(bpd.diff_weights_desc())
    dnnl.batch_normalization_backward(bpd).execute(s, b)
    s.wait()
    dx, dsc, dsh = R.batch_norm_backward(x.astype(np.float64), dy.astype(np.float64),
                                         a[dnnl.ARG_MEAN].to_numpy().astype(np.float64),
                                         a[dnnl.ARG_VARIANCE].to_numpy().astype(np.float64),
                                         eps, sc if flags & 0x2 else None, False,
                                         y > 0 if relu else None)
    _close(b[dnnl.ARG_DIFF_SRC].to_numpy(), dx)
    if flags & 0x2:
        _close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc)
    if flags & 0x4:
        _close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), dsh)
