"""The layer normalization primitives against the float64 numpy reference (its backward
checked by central finite differences) and ONNX's LayerNormalization (opset 17), with and
without a stat_desc, every allowed flag combination, plain / transposed / blocked / ``any``
layouts, and errors that name the argument and leave outputs untouched."""
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
FLAG_SETS = [F(sum(c)) for n in range(4) for c in itertools.combinations(
    (F.use_global_stats, F.use_scale, F.use_shift), n)]


def _data(dims, seed=0):
    rng = np.random.default_rng(seed)
    C, lead = dims[-1], dims[:-1]
    return dict(x=(rng.standard_normal(dims) * 1.5 + 0.5).astype(np.float32),
                dy=rng.standard_normal(dims).astype(np.float32),
                scale=rng.uniform(0.5, 1.5, C).astype(np.float32),
                shift=rng.standard_normal(C).astype(np.float32),
                mean=(rng.standard_normal(lead) * 0.3 + 0.5).astype(np.float32),
                var=rng.uniform(1.0, 3.0, lead).astype(np.float32))


def _mem(md, eng, v=None):
    return dnnl.memory(md, eng, v) if v is not None else dnnl.memory(md, eng)


def _close(got, want, tol=2e-5):
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


def _forward(eng, s, d, md, prop, flags, stat_md=None):
    P = dnnl.layer_normalization_forward.primitive_desc
    pd = (P(eng, prop, md, md, EPS, flags) if stat_md is None
          else P(eng, prop, md, md, stat_md, EPS, flags))
    g = bool(flags & F.use_global_stats)
    a = {dnnl.ARG_SRC: _mem(md, eng, d["x"]), dnnl.ARG_DST: _mem(pd.dst_desc(), eng)}
    if not pd.mean_desc().is_zero():
        a[dnnl.ARG_MEAN] = _mem(pd.mean_desc(), eng, d["mean"] if g else None)
        a[dnnl.ARG_VARIANCE] = _mem(pd.variance_desc(), eng, d["var"] if g else None)
    if flags & F.use_scale:
        a[dnnl.ARG_SCALE] = _mem(pd.weights_desc(), eng, d["scale"])
    if flags & F.use_shift:
        a[dnnl.ARG_SHIFT] = _mem(pd.weights_desc(), eng, d["shift"])
    dnnl.layer_normalization_forward(pd).execute(s, a)
    s.wait()
    return pd, a


def _backward(eng, s, d, md, prop, flags, pd, a, stat_md=None):
    P = dnnl.layer_normalization_backward.primitive_desc
    bpd = (P(eng, prop, md, md, md, EPS, flags, pd) if stat_md is None
           else P(eng, prop, md, md, md, stat_md, EPS, flags, pd))
    b = {k: a[k] for k in (dnnl.ARG_SRC, dnnl.ARG_MEAN, dnnl.ARG_VARIANCE, dnnl.ARG_SCALE,
                           dnnl.ARG_SHIFT) if k in bpd.arg_specs()}
    b[dnnl.ARG_DIFF_DST] = _mem(md, eng, d["dy"])
    b[dnnl.ARG_DIFF_SRC] = _mem(md, eng)
    for k in (dnnl.ARG_DIFF_SCALE, dnnl.ARG_DIFF_SHIFT):
        if k in bpd.arg_specs():
            b[k] = _mem(bpd.diff_weights_desc(), eng)
    dnnl.layer_normalization_backward(bpd).execute(s, b)
    s.wait()
    return bpd, b


LAYOUTS = {  # name: (dims, data tag, stat tag or None for the form without stat_desc)
    "tnc": ([3, 4, 37], "abc", None), "tnc_stat_ba": ([3, 4, 37], "abc", "ba"),
    "ntc": ([3, 4, 37], "bac", "ab"), "last_strided": ([4, 5, 6], "acb", None),
    "nc": ([7, 300], "ab", "a"), "4d": ([2, 3, 2, 9], "abcd", None),
    "5d": ([2, 2, 2, 2, 5], "abcde", None), "blocked_last": ([3, 20], "aB8b", None),
}


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("flags", FLAG_SETS, ids=lambda f: f"f{int(f)}")
def test_training_and_backward_match_reference(engine, stream, layout, flags):
    dims, t, st = LAYOUTS[layout]
    d = _data(dims, len(layout) + int(flags))
    md = dnnl.memory.desc(dims, dt.f32, t)
    stat_md = dnnl.memory.desc(dims[:-1], dt.f32, st) if st else None
    g = bool(flags & F.use_global_stats)
    sc = d["scale"] if flags & F.use_scale else None
    sh = d["shift"] if flags & F.use_shift else None
    pd, a = _forward(engine, stream, d, md, PK.forward_training, flags, stat_md)
    if stat_md is not None:
        assert pd.mean_desc() == stat_md
    y, m, v = R.layer_norm_forward(d["x"], EPS, d["mean"] if g else None,
                                   d["var"] if g else None, sc, sh)
    _close(a[dnnl.ARG_DST].to_numpy(), y)
    if not g:
        _close(a[dnnl.ARG_MEAN].to_numpy(), m)
        _close(a[dnnl.ARG_VARIANCE].to_numpy(), v)
    mean, var = a[dnnl.ARG_MEAN].to_numpy(), a[dnnl.ARG_VARIANCE].to_numpy()
    dx, dsc, dsh = R.layer_norm_backward(d["x"], d["dy"], mean, var, EPS, sc, g)
    for prop in (PK.backward, PK.backward_data):
        _, b = _backward(engine, stream, d, md, prop, flags, pd, a, stat_md)
        _close(b[dnnl.ARG_DIFF_SRC].to_numpy(), dx)
        if prop == PK.backward and flags & F.use_scale:
            _close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc)
        if prop == PK.backward and flags & F.use_shift:
            _close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), dsh)
        assert (dnnl.ARG_DIFF_SHIFT in b) == (prop == PK.backward and bool(flags & F.use_shift))


@pytest.mark.parametrize("flags", [F.none, F.use_scale | F.use_shift, F.use_global_stats])
def test_inference(engine, stream, flags):
    dims = [4, 3, 50]
    d = _data(dims, 3)
    md = dnnl.memory.desc(dims, dt.f32, tag.abc)
    pd, a = _forward(engine, stream, d, md, PK.forward_inference, flags)
    g = bool(flags & F.use_global_stats)
    assert pd.mean_desc().is_zero() == (not g)  # computed statistics are not exposed
    y, _, _ = R.layer_norm_forward(d["x"], EPS, d["mean"] if g else None,
                                   d["var"] if g else None,
                                   d["scale"] if flags & F.use_scale else None,
                                   d["shift"] if flags & F.use_shift else None)
    _close(a[dnnl.ARG_DST].to_numpy(), y)


@pytest.mark.parametrize("flags", [F.use_scale | F.use_shift, F.none,
                                   F.use_global_stats | F.use_scale])
def test_backward_matches_finite_differences(engine, stream, flags):
    dims = [2, 3, 5]
    d = _data(dims, 9)
    md = dnnl.memory.desc(dims, dt.f32, tag.abc)
    pd, a = _forward(engine, stream, d, md, PK.forward_training, flags)
    _, b = _backward(engine, stream, d, md, PK.backward, flags, pd, a)
    g = bool(flags & F.use_global_stats)
    dy = d["dy"].astype(np.float64)

    def loss(xv, sv, hv):
        y, _, _ = R.layer_norm_forward(xv, EPS, d["mean"] if g else None,
                                       d["var"] if g else None,
                                       sv if flags & F.use_scale else None,
                                       hv if flags & F.use_shift else None)
        return float((dy * y).sum())

    base = [d["x"].astype(np.float64), d["scale"].astype(np.float64),
            d["shift"].astype(np.float64)]
    h, grads = 1e-6, []
    for k in range(3):
        gr = np.zeros_like(base[k])
        for idx in np.ndindex(*base[k].shape):
            p = [v.copy() for v in base]
            p[k][idx] += h
            m = [v.copy() for v in base]
            m[k][idx] -= h
            gr[idx] = (loss(*p) - loss(*m)) / (2 * h)
        grads.append(gr)
    _close(b[dnnl.ARG_DIFF_SRC].to_numpy(), grads[0], 2e-4)
    if flags & F.use_scale:
        _close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), grads[1], 2e-4)
    if flags & F.use_shift:
        _close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), grads[2], 2e-4)


def test_matches_onnx_layer_normalization(engine, stream):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    dims = [2, 3, 16]
    d = _data(dims, 4)
    vi = helper.make_tensor_value_info
    node = helper.make_node("LayerNormalization", ["X", "S", "B"], ["Y", "M", "IS"], axis=-1,
                            epsilon=EPS)
    graph = helper.make_graph([node], "ln", [vi("X", TensorProto.FLOAT, dims),
                                             vi("S", TensorProto.FLOAT, [16]),
                                             vi("B", TensorProto.FLOAT, [16])],
                              [vi("Y", TensorProto.FLOAT, dims),
                               vi("M", TensorProto.FLOAT, [2, 3, 1]),
                               vi("IS", TensorProto.FLOAT, [2, 3, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    y, m, inv = ReferenceEvaluator(model).run(None, {"X": d["x"], "S": d["scale"],
                                                     "B": d["shift"]})
    md = dnnl.memory.desc(dims, dt.f32, tag.abc)
    _, a = _forward(engine, stream, d, md, PK.forward_training, F.use_scale | F.use_shift)
    _close(a[dnnl.ARG_DST].to_numpy(), y)
    _close(a[dnnl.ARG_MEAN].to_numpy(), m[..., 0])
    _close(1.0 / np.sqrt(a[dnnl.ARG_VARIANCE].to_numpy() + EPS), inv[..., 0])


def test_keyword_call_any_and_queries(cpu_engine):
    src = dnnl.memory.desc([4, 6, 8], dt.f32, tag.bac)
    anyd = dnnl.memory.desc([4, 6, 8], dt.f32, tag.any)
    flags = F.use_scale | F.use_shift
    pd = dnnl.layer_normalization_forward.primitive_desc(
        cpu_engine, PK.forward_training, src_desc=src, dst_desc=anyd, epsilon=0.25, flags=flags)
    assert pd.dst_desc() == src and pd.get_epsilon() == 0.25 and pd.get_flags() == flags
    assert pd.mean_desc() == dnnl.memory.desc([4, 6], dt.f32, tag.ab)
    assert pd.weights_desc() == dnnl.memory.desc([8], dt.f32, tag.a)
    stat = dnnl.memory.desc([4, 6], dt.f32, tag.ba)
    pd2 = dnnl.layer_normalization_forward.primitive_desc(
        cpu_engine, PK.forward_training, src, src, stat, 0.25, flags)
    bpd = dnnl.layer_normalization_backward.primitive_desc(
        cpu_engine, PK.backward, anyd, anyd, anyd, 0.25, flags, pd2)
    assert bpd.src_desc() == src and bpd.diff_src_desc() == src
    assert bpd.mean_desc() == stat  # the hint's statistics layout
    assert bpd.diff_weights_desc() == pd.weights_desc()


def test_bad_arguments_name_them(cpu_engine):
    eng = cpu_engine
    md = dnnl.memory.desc([2, 3, 4], dt.f32, tag.abc)
    P = dnnl.layer_normalization_forward.primitive_desc
    with pytest.raises(dnnl.invalid_arguments, match="fuse_norm_relu"):
        P(eng, PK.forward_training, md, md, EPS, F.fuse_norm_relu)
    with pytest.raises(dnnl.invalid_arguments, match=r"stat_desc dims \[2, 4\], expected"):
        P(eng, PK.forward_training, md, md, dnnl.memory.desc([2, 4], dt.f32, tag.ab), EPS, 0)
    with pytest.raises(dnnl.invalid_arguments, match="aprop_kind must be forward_training"):
        P(eng, PK.backward_data, md, md, EPS, 0)
    with pytest.raises(dnnl.unimplemented, match="up to 5 are implemented"):
        six = dnnl.memory.desc([1] * 6, dt.f32, "abcdef")
        P(eng, PK.forward_training, six, six, EPS, 0)
    with pytest.raises(dnnl.unimplemented, match="dst_desc data type s8"):
        P(eng, PK.forward_training, md, dnnl.memory.desc([2, 3, 4], dt.s8, tag.abc), EPS, 0)
    fwd = P(eng, PK.forward_training, md, md, EPS, 0)
    B = dnnl.layer_normalization_backward.primitive_desc
    with pytest.raises(dnnl.invalid_arguments, match="hint_fwd_pd must be a layer_norm"):
        bn = dnnl.batch_normalization_forward.primitive_desc(eng, PK.forward_training, md, md,
                                                             EPS, 0)
        B(eng, PK.backward, md, md, md, EPS, 0, bn)
    with pytest.raises(dnnl.invalid_arguments, match=r"diff_dst_desc dims \[2, 3, 5\]"):
        B(eng, PK.backward, md, dnnl.memory.desc([2, 3, 5], dt.f32, tag.abc), md, EPS, 0, fwd)


def test_execute_errors_leave_outputs_untouched(cpu_engine):
    eng, s = cpu_engine, dnnl.stream(cpu_engine)
    md = dnnl.memory.desc([2, 3, 4], dt.f32, tag.abc)
    pd = dnnl.layer_normalization_forward.primitive_desc(eng, PK.forward_training, md, md, EPS,
                                                         F.use_shift)
    dst = _mem(md, eng, np.full((2, 3, 4), 7.0, np.float32))
    mean = _mem(pd.mean_desc(), eng, np.full((2, 3), 7.0, np.float32))
    var = _mem(pd.variance_desc(), eng, np.full((2, 3), 7.0, np.float32))
    args = {dnnl.ARG_SRC: _mem(md, eng, np.ones((2, 3, 4), np.float32)), dnnl.ARG_DST: dst,
            dnnl.ARG_MEAN: mean, dnnl.ARG_VARIANCE: var}
    prim = dnnl.layer_normalization_forward(pd)
    with pytest.raises(dnnl.invalid_arguments, match="missing argument ARG_SHIFT"):
        prim.execute(s, args)
    with pytest.raises(dnnl.invalid_arguments, match="unexpected argument ARG_SCALE"):
        prim.execute(s, {**args, dnnl.ARG_SHIFT: _mem(pd.weights_desc(), eng),
                         dnnl.ARG_SCALE: _mem(pd.weights_desc(), eng)})
    s.wait()
    for m in (dst, mean, var):
        assert (m.to_numpy() == 7).all()


# bf16 / f16 src, dst and gradients with float computation; statistics, scale and shift f32.
# References are float64 over the inputs as stored (rounded to their type first); an output
# of a low-precision type then differs by its own rounding (half the type's epsilon of its
# magnitude) plus float computation: tolerance one epsilon (bf16 2^-8, f16 2^-11) of the
# largest value (the _close rule). f32 outputs (statistics, dst of f32, parameter gradients)
# keep the f32 tolerances of the tests above (sums of up to 300 terms: 1e-4).
EPS_T = {dt.bf16: 2.0 ** -8, dt.f16: 2.0 ** -11, dt.f32: 2e-5}


@pytest.mark.parametrize("sdt,ddt", [(dt.bf16, dt.bf16), (dt.f16, dt.f16), (dt.bf16, dt.f32),
                                     (dt.f32, dt.f16)], ids=lambda d: d.name)
@pytest.mark.parametrize("dims", [(6, 5, 300), (40, 24)], ids=["6x5x300", "40x24"])
def test_low_precision(engine, stream, dims, sdt, ddt):
    eng, s = engine, stream
    d = _data(dims, seed=7)
    tg = "abcd"[:len(dims)]
    flags = F.use_scale | F.use_shift
    smd, dmd = dnnl.memory.desc(dims, sdt, tg), dnnl.memory.desc(dims, ddt, "any")
    pd = dnnl.layer_normalization_forward.primitive_desc(eng, PK.forward_training, smd, dmd,
                                                         EPS, flags)
    assert pd.dst_desc().data_type == ddt and pd.mean_desc().data_type == dt.f32
    src = _mem(smd, eng, d["x"])
    x = np.asarray(src.to_numpy(), np.float64)
    a = {dnnl.ARG_SRC: src, dnnl.ARG_DST: _mem(pd.dst_desc(), eng),
         dnnl.ARG_MEAN: _mem(pd.mean_desc(), eng), dnnl.ARG_VARIANCE: _mem(pd.mean_desc(), eng),
         dnnl.ARG_SCALE: _mem(pd.weights_desc(), eng, d["scale"]),
         dnnl.ARG_SHIFT: _mem(pd.weights_desc(), eng, d["shift"])}
    dnnl.layer_normalization_forward(pd).execute(s, a)
    s.wait()
    y, m, v = R.layer_norm_forward(x, EPS, scale=d["scale"], shift=d["shift"])
    _close(a[dnnl.ARG_DST].to_numpy(), y, EPS_T[ddt])
    _close(a[dnnl.ARG_MEAN].to_numpy(), m)
    _close(a[dnnl.ARG_VARIANCE].to_numpy(), v)
    # backward: diff_dst of dst's type, diff_src of src's type
    bpd = dnnl.layer_normalization_backward.primitive_desc(
        eng, PK.backward, dnnl.memory.desc(dims, sdt, "any"),
        dnnl.memory.desc(dims, ddt, tg), smd, EPS, flags, pd)
    assert bpd.diff_src_desc().data_type == sdt
    ddm = _mem(bpd.diff_dst_desc(), eng, d["dy"])
    dy = np.asarray(ddm.to_numpy(), np.float64)
    b = {dnnl.ARG_SRC: src, dnnl.ARG_MEAN: a[dnnl.ARG_MEAN],
         dnnl.ARG_VARIANCE: a[dnnl.ARG_VARIANCE], dnnl.ARG_SCALE: a[dnnl.ARG_SCALE],
         dnnl.ARG_DIFF_DST: ddm, dnnl.ARG_DIFF_SRC: _mem(bpd.diff_src_desc(), eng),
         dnnl.ARG_DIFF_SCALE: _mem(bpd.diff_weights_desc(), eng),
         dnnl.ARG_DIFF_SHIFT: _mem(bpd.diff_weights_desc(), eng)}
    dnnl.layer_normalization_backward(bpd).execute(s, b)
    s.wait()
    gm = np.asarray(a[dnnl.ARG_MEAN].to_numpy(), np.float64)
    gv = np.asarray(a[dnnl.ARG_VARIANCE].to_numpy(), np.float64)
    dx, dg, db = R.layer_norm_backward(x, dy, gm, gv, EPS, scale=d["scale"])
    _close(b[dnnl.ARG_DIFF_SRC].to_numpy(), dx, EPS_T[sdt])
    _close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), dg, 1e-4)
    _close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), db, 1e-4)


@pytest.mark.parametrize("flags", [F.use_scale | F.use_shift, F.use_global_stats | F.use_scale,
                                   F.none])
def test_register_cached_rows_match_reference(engine, stream, monkeypatch, flags):
    """The GPU path (each work-item keeps its values of the row in registers), forced on the
    CPU device; a row length not a multiple of the work-group."""
    from pydnnl.runtime.heuristics import normalization as rules
    monkeypatch.setattr(rules, "ln_row_cache", lambda info, C, wg: -(-C // wg))
    dims = [3, 2, 37]
    d = _data(dims, 11)
    md = dnnl.memory.desc(dims, dt.f32, tag.abc)
    g = bool(flags & F.use_global_stats)
    sc = d["scale"] if flags & F.use_scale else None
    sh = d["shift"] if flags & F.use_shift else None
    pd, a = _forward(engine, stream, d, md, PK.forward_training, flags)
    assert pd.cache == -(-37 // pd.wg)
    y, m, v = R.layer_norm_forward(d["x"], EPS, d["mean"] if g else None,
                                   d["var"] if g else None, sc, sh)
    _close(a[dnnl.ARG_DST].to_numpy(), y)
    mean, var = a[dnnl.ARG_MEAN].to_numpy(), a[dnnl.ARG_VARIANCE].to_numpy()
    dx, dsc, dsh = R.layer_norm_backward(d["x"], d["dy"], mean, var, EPS, sc, g)
    bpd, b = _backward(engine, stream, d, md, PK.backward, flags, pd, a)
    assert bpd.cache == pd.cache
    _close(b[dnnl.ARG_DIFF_SRC].to_numpy(), dx)
    if flags & F.use_scale:
        _close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc)
    if flags & F.use_shift:
        _close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), dsh)


def test_fused_scale_shift_rule_closed_form():
    """runtime/heuristics/normalization.py ``ln_bwd_fused_ss``: CPU rows without a register
    cache sum diff_scale/diff_shift in the row kernel, cached CPU rows keep the column kernel;
    GPUs fuse rows in registers over work-groups of 256 lanes."""
    from pydnnl.engine import DeviceInfo
    from pydnnl.runtime.heuristics.normalization import ln_bwd_fused_ss

    def info(kind):
        return DeviceInfo(name="made-up", vendor="v", platform="p", driver_version="1",
                          device_version="OpenCL 3.0", type=kind, compute_units=2,
                          global_mem_bytes=1 << 34, local_mem_bytes=1 << 16,
                          max_work_group_size=1024, max_clock_mhz=0, fp16=True, fp64=True,
                          preferred_float_vector_width=1)

    assert ln_bwd_fused_ss(info("cpu"), 0)
    assert not ln_bwd_fused_ss(info("cpu"), 4)
    assert not ln_bwd_fused_ss(info("gpu"), 0)
    # rows in registers over 256 lanes: the sums stay there too; narrower groups keep the
    # column kernel
    assert ln_bwd_fused_ss(info("gpu"), 16, 256)
    assert not ln_bwd_fused_ss(info("gpu"), 12, 64)


@pytest.mark.parametrize("dims, ss_rows", [([3, 2, 37], 4), ([5, 70], 2), ([2, 3, 64], 6)],
                         ids=["tail_group", "two_rows", "one_group"])
def test_register_cached_rows_with_fused_scale_shift(engine, stream, monkeypatch, dims,
                                                      ss_rows):
    """The GPU backward (rows in registers, each lane summing its columns of diff_scale and
    diff_shift over a chunk of rows in registers, one partial row per chunk), forced on the
    CPU device: a last chunk shorter than the others, a row length not a multiple of the
    work-group, and one chunk holding every row."""
    from pydnnl.runtime.heuristics import normalization as rules
    monkeypatch.setattr(rules, "ln_row_cache", lambda info, C, wg: -(-C // wg))
    monkeypatch.setattr(rules, "ln_bwd_fused_ss", lambda info, cache, wg=0: bool(cache))
    monkeypatch.setattr(rules, "ln_ss_rows", lambda info: ss_rows)
    monkeypatch.setattr(rules, "ln_bwd_vec", lambda info, C, fused: 0)
    flags = F.use_scale | F.use_shift
    d = _data(dims, 17)
    md = dnnl.memory.desc(dims, dt.f32, tag.abc if len(dims) == 3 else tag.ab)
    pd, a = _forward(engine, stream, d, md, PK.forward_training, flags)
    mean, var = a[dnnl.ARG_MEAN].to_numpy(), a[dnnl.ARG_VARIANCE].to_numpy()
    dx, dsc, dsh = R.layer_norm_backward(d["x"], d["dy"], mean, var, EPS, d["scale"], False)
    bpd, b = _backward(engine, stream, d, md, PK.backward, flags, pd, a)
    rows = int(np.prod(dims[:-1]))
    assert bpd.cache and bpd.fused_ss and bpd.groups == -(-rows // ss_rows)
    _close(b[dnnl.ARG_DIFF_SRC].to_numpy(), dx)
    _close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc)
    _close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), dsh)


@pytest.mark.parametrize("C", [128, 100, 200], ids=["whole", "tail", "tail_long"])
def test_split_row_sums_match_reference(engine, stream, monkeypatch, C):
    """The statistics passes with several partial sums per lane (``ln_row_accs``, CPUs),
    forced on any device: rows a whole number of 4-vector steps and rows with a tail."""
    from pydnnl.runtime.heuristics import normalization as rules
    dims = [3, 5, C]
    d = _data(dims, C)
    md = dnnl.memory.desc(dims, dt.f32, tag.abc)
    flags = F.use_scale | F.use_shift
    monkeypatch.setattr(rules, "ln_row_accs", lambda info, C, wg, cache: 1 if cache else 4)
    monkeypatch.setattr(rules, "ln_fwd_vec", lambda info, C: 0)
    pd, a = _forward(engine, stream, d, md, PK.forward_training, flags)
    assert pd.accs == (1 if pd.cache else 4)
    y, m, v = R.layer_norm_forward(d["x"], EPS, None, None, d["scale"], d["shift"])
    _close(a[dnnl.ARG_DST].to_numpy(), y)
    _close(a[dnnl.ARG_MEAN].to_numpy(), m)
    _close(a[dnnl.ARG_VARIANCE].to_numpy(), v)


@pytest.mark.parametrize("C,accs", [(128, 2), (100, 2), (200, 1), (37, 2), (8, 1)],
                         ids=["whole", "tail", "tail_one_sum", "short", "one_vector"])
def test_vector_row_forward_matches_reference(engine, stream, monkeypatch, C, accs):
    """The forward with one work-item per row in float8 vectors (``ln_fwd_vec``, CPUs),
    forced on any device: whole vectors, a vector step after the paired sums, scalar tails."""
    from pydnnl.runtime.heuristics import normalization as rules
    dims = [3, 5, C]
    d = _data(dims, C)
    md = dnnl.memory.desc(dims, dt.f32, tag.abc)
    monkeypatch.setattr(rules, "ln_fwd_vec", lambda info, C: 8)
    monkeypatch.setattr(rules, "ln_fwd_vec_accs", lambda info, C, vec: accs)
    # rows per work-item: 4 leaves a partial last work-item over the 15 rows
    monkeypatch.setattr(rules, "ln_fwd_vec_rows", lambda info, C: 4)
    for flags in (F.use_scale | F.use_shift, F.use_scale, F.none):
        pd, a = _forward(engine, stream, d, md, PK.forward_training, flags)
        assert pd.vec == 8
        sc = d["scale"] if flags & F.use_scale else None
        sh = d["shift"] if flags & F.use_shift else None
        y, m, v = R.layer_norm_forward(d["x"], EPS, None, None, sc, sh)
        _close(a[dnnl.ARG_DST].to_numpy(), y)
        _close(a[dnnl.ARG_MEAN].to_numpy(), m)
        _close(a[dnnl.ARG_VARIANCE].to_numpy(), v)
