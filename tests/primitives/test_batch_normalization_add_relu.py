"""Batch normalization with ``fuse_norm_add_relu`` (oneDNN's flag 0x10):
``dst = ReLU(bn(src) + src_1)`` with ``src_1`` (``ARG_SRC_1``) in dst's desc, the ReLU mask
in the workspace (forward training), and backward's masked ``diff_dst`` as ``diff_src_1``
(``ARG_DIFF_SRC_1``, in diff_dst's desc) feeding diff_src / diff_scale / diff_shift.

Checked against the float64 numpy reference (pydnnl.reference.normalization) and central
finite differences of the reference forward; plain, channels-last, blocked and mixed
src/dst layouts, 2-D to 5-D, bf16/f16 data, the split-statistics and the
one-kernel-per-channel paths, run-time sizes, the queries, errors that leave outputs
untouched, and the changed kernels once under Oclgrind."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference import normalization as R

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "kernels"))
from oclgrind_helpers import has_oclgrind, run_probe  # noqa: E402

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
F = dnnl.normalization_flags
PK = dnnl.prop_kind
EPS = 1e-3
A = F.fuse_norm_add_relu
SS = F.use_scale | F.use_shift

# name -> (dims, src tag, dst tag): src_1 takes dst's desc, diff_src_1 diff_dst's
LAYOUTS = {"nc": ([6, 5], "ab", "ab"), "nchw": ([2, 5, 3, 4], "abcd", "abcd"),
           "nhwc": ([2, 5, 3, 4], "acdb", "acdb"), "nChw8c": ([2, 11, 3, 3], "aBcd8b", "aBcd8b"),
           "ncdhw": ([2, 3, 2, 3, 2], "abcde", "abcde"),
           "nchw_to_nhwc": ([2, 5, 3, 4], "abcd", "acdb")}


def _data(dims, seed):
    rng = np.random.default_rng(seed)
    C = dims[1]
    return dict(x=(rng.standard_normal(dims) * 1.5 + 0.7).astype(np.float32),
                z=rng.standard_normal(dims).astype(np.float32),
                dy=rng.standard_normal(dims).astype(np.float32),
                scale=rng.uniform(0.5, 1.5, C).astype(np.float32),
                shift=rng.standard_normal(C).astype(np.float32),
                mean=(rng.standard_normal(C) * 0.3 + 0.7).astype(np.float32),
                var=rng.uniform(1.0, 3.0, C).astype(np.float32))


@pytest.fixture(scope="module")
def data():
    """The inputs of every shape used here, made once."""
    cache = {}

    def get(dims, seed=0):
        key = (tuple(dims), seed)
        if key not in cache:
            cache[key] = _data(dims, seed)
        return cache[key]
    return get


def _mem(md, eng, v=None):
    return dnnl.memory(md, eng, v) if v is not None else dnnl.memory(md, eng)


def _close(got, want, tol=2e-5):
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


def _forward(eng, s, d, md, prop, flags, dst_md=None):
    pd = dnnl.batch_normalization_forward.primitive_desc(eng, prop, md, dst_md or md, EPS,
                                                         flags)
    g = bool(flags & F.use_global_stats)
    args = {dnnl.ARG_SRC: _mem(pd.src_desc(), eng, d["x"]),
            dnnl.ARG_DST: _mem(pd.dst_desc(), eng),
            dnnl.ARG_SRC_1: _mem(pd.dst_desc(3), eng, d["z"])}
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


def _backward(eng, s, d, pd, a, prop, flags, diff_src_md, diff_dst_md, src_md):
    bpd = dnnl.batch_normalization_backward.primitive_desc(eng, prop, diff_src_md, diff_dst_md,
                                                           src_md, EPS, flags, pd)
    b = {k: a[k] for k in (dnnl.ARG_SRC, dnnl.ARG_MEAN, dnnl.ARG_VARIANCE, dnnl.ARG_SCALE,
                           dnnl.ARG_SHIFT, dnnl.ARG_WORKSPACE) if k in bpd.arg_specs()}
    b[dnnl.ARG_DIFF_DST] = _mem(bpd.diff_dst_desc(), eng, d["dy"])
    b[dnnl.ARG_DIFF_SRC] = _mem(bpd.diff_src_desc(), eng)
    b[dnnl.ARG_DIFF_SRC_1] = _mem(bpd.diff_dst_desc(1), eng)
    for k in (dnnl.ARG_DIFF_SCALE, dnnl.ARG_DIFF_SHIFT):
        if k in bpd.arg_specs():
            b[k] = _mem(bpd.diff_weights_desc(), eng)
    dnnl.batch_normalization_backward(bpd).execute(s, b)
    s.wait()
    return bpd, b


def _sc_sh(d, flags):
    return (d["scale"] if flags & F.use_scale else None,
            d["shift"] if flags & F.use_shift else None)


def _check_training(eng, s, d, spec, flags):
    """Forward training, then backward and backward_data of ``spec`` (dims, src tag, dst
    tag), against the reference."""
    dims, ts, td = spec
    md, dmd = dnnl.memory.desc(dims, dt.f32, ts), dnnl.memory.desc(dims, dt.f32, td)
    g = bool(flags & F.use_global_stats)
    sc, sh = _sc_sh(d, flags)
    pd, a = _forward(eng, s, d, md, PK.forward_training, flags, dmd)
    assert pd.dst_desc(3) == dmd == pd.query_md(dnnl.query.exec_arg_md, dnnl.ARG_SRC_1)
    assert pd.src_desc(1).is_zero() == (not g)  # oneDNN: src_md(1) is the mean or nothing
    y, m, v = R.batch_norm_forward(d["x"], EPS, d["mean"] if g else None,
                                   d["var"] if g else None, sc, sh, add=d["z"])
    _close(a[dnnl.ARG_DST].to_numpy(), y)
    if not g:
        _close(a[dnnl.ARG_MEAN].to_numpy(), m)
        _close(a[dnnl.ARG_VARIANCE].to_numpy(), v)
    mask = a[dnnl.ARG_WORKSPACE].to_numpy()[:y.size].reshape(y.shape) != 0
    np.testing.assert_array_equal(mask, y > 0)
    mean, var = a[dnnl.ARG_MEAN].to_numpy(), a[dnnl.ARG_VARIANCE].to_numpy()
    dx, dsc, dsh, d1 = R.batch_norm_backward_add_relu(d["x"], d["dy"], mean, var, EPS, mask,
                                                      sc, g)
    for prop in (PK.backward, PK.backward_data):
        # diff_dst in dst's layout, diff_src in src's: diff_src_1 follows diff_dst
        bpd, b = _backward(eng, s, d, pd, a, prop, flags, md, dmd, md)
        assert bpd.diff_dst_desc(1) == dmd and bpd.diff_src_desc(1).is_zero()
        _close(b[dnnl.ARG_DIFF_SRC].to_numpy(), dx)
        np.testing.assert_array_equal(b[dnnl.ARG_DIFF_SRC_1].to_numpy(), d1)
        if prop == PK.backward and flags & F.use_scale:
            _close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc)
        if prop == PK.backward and flags & F.use_shift:
            _close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), dsh)
        assert (dnnl.ARG_DIFF_SCALE in b) == (prop == PK.backward and bool(flags & F.use_scale))


# the flag alone (no scale, no shift) runs in the inference and error tests; both ReLU flags:
# one ReLU, after the addition
FLAG_SETS = [A | SS, A | SS | F.use_global_stats, A | F.fuse_norm_relu | F.use_scale]


@pytest.mark.sampled(every=3)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("flags", FLAG_SETS, ids=lambda f: f"f{int(f)}")
def test_training_and_backward_match_reference(engine, stream, data, layout, flags):
    spec = LAYOUTS[layout]
    _check_training(engine, stream, data(spec[0], int(flags)), spec, flags)


@pytest.mark.parametrize("flags", [A, A | F.use_global_stats | F.use_scale],
                         ids=lambda f: f"f{int(f)}")
def test_forward_inference(engine, stream, data, flags):
    dims = [3, 4, 5, 2]
    d = data(dims, 7)
    md = dnnl.memory.desc(dims, dt.f32, tag.nchw)
    pd, a = _forward(engine, stream, d, md, PK.forward_inference, flags)
    g = bool(flags & F.use_global_stats)
    assert pd.workspace_desc().is_zero() and dnnl.ARG_SRC_1 in pd.arg_specs()
    y, _, _ = R.batch_norm_forward(d["x"], EPS, d["mean"] if g else None,
                                   d["var"] if g else None, *_sc_sh(d, flags), add=d["z"])
    _close(a[dnnl.ARG_DST].to_numpy(), y)


def test_in_place_dst_over_src_1(cpu_engine, data):
    """A residual block's ``x = relu(bn(y) + x)`` in place: dst shares src_1's memory (each
    element's src_1 is read before its dst is written, by the same work-item)."""
    eng, s = cpu_engine, dnnl.stream(cpu_engine)
    dims = [2, 5, 3, 4]
    d = data(dims, 9)
    md = dnnl.memory.desc(dims, dt.f32, tag.nchw)
    pd = dnnl.batch_normalization_forward.primitive_desc(eng, PK.forward_inference, md, md,
                                                         EPS, A | SS)
    m = _mem(md, eng, d["z"])
    dnnl.batch_normalization_forward(pd).execute(s, {
        dnnl.ARG_SRC: _mem(md, eng, d["x"]), dnnl.ARG_DST: m, dnnl.ARG_SRC_1: m,
        dnnl.ARG_SCALE: _mem(pd.weights_desc(), eng, d["scale"]),
        dnnl.ARG_SHIFT: _mem(pd.weights_desc(), eng, d["shift"])})
    s.wait()
    _close(m.to_numpy(), R.batch_norm_forward(d["x"], EPS, None, None, d["scale"], d["shift"],
                                              add=d["z"])[0])


def test_fused_channel_kernel_matches_reference(engine, stream, data, monkeypatch):
    """The one-kernel-per-channel path (the CPUs' choice where channels fill the cores),
    forced: 4 lanes over runs of 63 (an unrolled part, a plain step and a tail)."""
    from pydnnl.runtime.heuristics import normalization as rules
    monkeypatch.setattr(rules, "bn_fused", lambda info, C, nbytes, run: (True, 4, False))
    md = dnnl.memory.desc([3, 4, 7, 9], dt.f32, tag.nchw)
    pd = dnnl.batch_normalization_forward.primitive_desc(engine, PK.forward_training, md, md,
                                                         EPS, A | SS)
    assert pd.impl_info_str() == "ocl:bnorm:fused"
    _check_training(engine, stream, data([3, 4, 7, 9], 3), ([3, 4, 7, 9], "abcd", "abcd"),
                    A | SS)


def _fd(d, flags, h=1e-6):
    """Central differences of ``sum(dy * dst)`` through the float64 reference forward, by
    x, scale, shift and src_1."""
    g = bool(flags & F.use_global_stats)
    dy = d["dy"].astype(np.float64)

    def loss(x, sc, sh, z):
        y, _, _ = R.batch_norm_forward(x, EPS, d["mean"] if g else None,
                                       d["var"] if g else None, sc, sh, add=z)
        return float((dy * y).sum())

    base = [d[k].astype(np.float64) for k in ("x", "scale", "shift", "z")]
    out = []
    for i, arr in enumerate(base):
        grad = np.zeros_like(arr)
        for idx in np.ndindex(*arr.shape):
            p, m = [b.copy() for b in base], [b.copy() for b in base]
            p[i][idx] += h
            m[i][idx] -= h
            grad[idx] = (loss(*p) - loss(*m)) / (2 * h)
        out.append(grad)
    return out


@pytest.mark.parametrize("flags", [A | SS, A | SS | F.use_global_stats],
                         ids=lambda f: f"f{int(f)}")
def test_backward_matches_finite_differences(engine, stream, data, flags):
    dims = [2, 3, 2, 2]
    d = data(dims, 11)
    md = dnnl.memory.desc(dims, dt.f32, tag.nchw)
    pd, a = _forward(engine, stream, d, md, PK.forward_training, flags)
    _, b = _backward(engine, stream, d, pd, a, PK.backward, flags, md, md, md)
    gx, gs, gh, gz = _fd(d, flags)
    tol = 2e-4
    _close(b[dnnl.ARG_DIFF_SRC].to_numpy(), gx, tol)
    _close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), gs, tol)
    _close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), gh, tol)
    _close(b[dnnl.ARG_DIFF_SRC_1].to_numpy(), gz, tol)


# bf16/f16 data: f32 arithmetic, dst and diff_src rounded once on store, within two unit
# roundoffs (plus 2e-5 of the largest value) of the float64 reference of the stored inputs,
# as in test_batch_normalization.py; diff_src_1 is the stored diff_dst, masked: exact
UNIT = {"bf16": 2.0 ** -9, "f16": 2.0 ** -12}


def _low_close(got, want, kind):
    bound = 2 * UNIT[kind] * np.abs(want) + 2e-5 * max(1.0, np.abs(want).max())
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) - bound))


@pytest.mark.parametrize("kind,t", [("bf16", "acdb"), ("f16", "abcd")])
def test_bf16_f16_match_reference_of_stored_inputs(engine, stream, data, kind, t):
    dims, flags = [2, 5, 3, 4], A | SS
    d = data(dims, 5)
    md = dnnl.memory.desc(dims, dt[kind], t)
    anyd = dnnl.memory.desc(dims, dt[kind], tag.any)
    pd, a = _forward(engine, stream, d, md, PK.forward_training, flags, dst_md=anyd)
    assert pd.dst_desc(3) == md
    xs = a[dnnl.ARG_SRC].to_numpy().astype(np.float64)
    zs = a[dnnl.ARG_SRC_1].to_numpy().astype(np.float64)
    y, _, _ = R.batch_norm_forward(xs, EPS, None, None, d["scale"], d["shift"], add=zs)
    _low_close(a[dnnl.ARG_DST].to_numpy().astype(np.float64), y, kind)
    mask = a[dnnl.ARG_WORKSPACE].to_numpy()[:y.size].reshape(y.shape) != 0
    np.testing.assert_array_equal(mask, a[dnnl.ARG_DST].to_numpy() > 0)
    bpd, b = _backward(engine, stream, d, pd, a, PK.backward, flags, anyd, anyd, md)
    assert bpd.diff_dst_desc(1) == md
    dys = b[dnnl.ARG_DIFF_DST].to_numpy().astype(np.float64)
    dx, dsc, dsh, d1 = R.batch_norm_backward_add_relu(
        xs, dys, a[dnnl.ARG_MEAN].to_numpy(), a[dnnl.ARG_VARIANCE].to_numpy(), EPS, mask,
        d["scale"])
    _low_close(b[dnnl.ARG_DIFF_SRC].to_numpy().astype(np.float64), dx, kind)
    np.testing.assert_array_equal(b[dnnl.ARG_DIFF_SRC_1].to_numpy().astype(np.float64), d1)
    _close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc, 1e-4)
    _close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), dsh, 1e-4)


def test_new_shape_reuses_programs(engine, stream, data, requested):
    """A second minibatch and image size of the same plain layout reuses the programs with
    the flag: forward and backward elementwise passes and split statistics (or the
    one-kernel-per-channel path, where the device's rule picks it). At least 256 values per
    channel: GPUs' reductions shrink their groups below that."""
    a, b = ([6, 4, 5, 9], "abcd", "abcd"), ([7, 4, 6, 9], "abcd", "abcd")
    _check_training(engine, stream, data(a[0], 1), a, A | SS)
    first = set(requested)
    _check_training(engine, stream, data(b[0], 2), b, A | SS)
    new = {fam for fam, key in requested if (fam, key) not in first}
    assert not new, new


def test_queries_without_the_flag(cpu_engine):
    md = dnnl.memory.desc([2, 3, 4], dt.f32, tag.abc)
    pd = dnnl.batch_normalization_forward.primitive_desc(cpu_engine, PK.forward_training, md,
                                                         md, EPS, F.fuse_norm_relu)
    assert pd.dst_desc(3).is_zero() and dnnl.ARG_SRC_1 not in pd.arg_specs()
    bpd = dnnl.batch_normalization_backward.primitive_desc(cpu_engine, PK.backward, md, md, md,
                                                           EPS, F.fuse_norm_relu, pd)
    assert bpd.diff_dst_desc(1).is_zero() and dnnl.ARG_DIFF_SRC_1 not in bpd.arg_specs()


def test_bad_inputs_raise_and_leave_outputs_untouched(cpu_engine):
    eng, s = cpu_engine, dnnl.stream(cpu_engine)
    dims = [2, 3, 4]
    md = dnnl.memory.desc(dims, dt.f32, tag.abc)
    P = dnnl.batch_normalization_forward.primitive_desc
    B = dnnl.batch_normalization_backward.primitive_desc
    pd = P(eng, PK.forward_training, md, md, EPS, A)
    seven = np.full(dims, 7.0, np.float32)
    a = {dnnl.ARG_SRC: _mem(md, eng, np.ones(dims, np.float32)), dnnl.ARG_DST: _mem(md, eng, seven),
         dnnl.ARG_MEAN: _mem(pd.mean_desc(), eng, np.full(3, 7.0, np.float32)),
         dnnl.ARG_VARIANCE: _mem(pd.variance_desc(), eng, np.full(3, 7.0, np.float32)),
         dnnl.ARG_WORKSPACE: _mem(pd.workspace_desc(), eng,
                                  np.full(pd.workspace_desc().get_size(), 7, np.uint8))}
    fwd = dnnl.batch_normalization_forward(pd)
    with pytest.raises(dnnl.invalid_arguments, match=r"missing argument ARG_SRC_1 \(expected"):
        fwd.execute(s, a)
    wrong = dnnl.memory.desc([2, 3, 5], dt.f32, tag.abc)
    with pytest.raises(dnnl.invalid_arguments,
                       match=r"argument ARG_SRC_1 has desc .*\[2, 3, 5\].*the primitive expects "
                             r".*\[2, 3, 4\]"):
        fwd.execute(s, {**a, dnnl.ARG_SRC_1: _mem(wrong, eng)})
    # src_1 takes dst's layout (oneDNN's dst_md(3)), not src's
    pd2 = P(eng, PK.forward_training, md, dnnl.memory.desc(dims, dt.f32, tag.acb), EPS, A)
    with pytest.raises(dnnl.invalid_arguments, match="argument ARG_SRC_1 has desc"):
        dnnl.batch_normalization_forward(pd2).execute(
            s, {**a, dnnl.ARG_DST: _mem(pd2.dst_desc(), eng), dnnl.ARG_SRC_1: _mem(md, eng)})
    s.wait()
    assert (a[dnnl.ARG_DST].to_numpy() == 7).all() and (a[dnnl.ARG_MEAN].to_numpy() == 7).all()
    assert (a[dnnl.ARG_VARIANCE].to_numpy() == 7).all()
    assert (a[dnnl.ARG_WORKSPACE].to_numpy() == 7).all()
    # backward: diff_src_1 is an output that must come; the hint must carry the workspace
    bpd = B(eng, PK.backward_data, md, md, md, EPS, A, pd)
    b = {dnnl.ARG_SRC: a[dnnl.ARG_SRC], dnnl.ARG_MEAN: a[dnnl.ARG_MEAN],
         dnnl.ARG_VARIANCE: a[dnnl.ARG_VARIANCE], dnnl.ARG_WORKSPACE: a[dnnl.ARG_WORKSPACE],
         dnnl.ARG_DIFF_DST: _mem(md, eng, np.ones(dims, np.float32)),
         dnnl.ARG_DIFF_SRC: _mem(md, eng, seven)}
    with pytest.raises(dnnl.invalid_arguments, match="missing argument ARG_DIFF_SRC_1"):
        dnnl.batch_normalization_backward(bpd).execute(s, b)
    s.wait()
    assert (b[dnnl.ARG_DIFF_SRC].to_numpy() == 7).all()
    inference = P(eng, PK.forward_inference, md, md, EPS, A)
    with pytest.raises(dnnl.invalid_arguments,
                       match="flags have fuse_norm_add_relu, but hint_fwd_pd has no workspace"):
        B(eng, PK.backward, md, md, md, EPS, A, inference)
    # layer normalization has no such flag (oneDNN: invalid there)
    with pytest.raises(dnnl.invalid_arguments, match="flags"):
        dnnl.layer_normalization_forward.primitive_desc(eng, PK.forward_training, md, md, EPS, A)


def test_benchdnn_flag_letter_a(capsys, benchdnn_engine):
    """benchdnn's letter ``A`` (its bnorm driver's spelling of fuse_norm_add_relu):
    correctness mode over the four directions, src_1 / diff_src_1 checked."""
    from pydnnl.benchdnn.__main__ import main
    from pydnnl.benchdnn.bnorm import parse_flags

    assert parse_flags("CHA", "GCHRSA") == SS | A
    rc = main([benchdnn_engine, "--bnorm", "--mode=C", "--flags=CHA", "--dir=FWD_D", "mb2ic5ih3iw4",
               "--dir=FWD_I", "mb2ic5ih3iw4", "--tag=nhwc", "--dir=BWD_DW", "mb2ic5ih3iw4",
               "--flags=GA", "--tag=nChw8c", "--dir=BWD_D", "mb2ic11ih3"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("check,passed,bnorm") == 4, out


# -- Oclgrind ----------------------------------------------------------------------------------

PROBE = r"""
import json
import numpy as np
import pydnnl as dnnl
from pydnnl.reference import normalization as R

dt, F, PK = dnnl.memory.data_type, dnnl.normalization_flags, dnnl.prop_kind
eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(1)
results = {}
EPS = 1e-3
FL = F.use_scale | F.use_shift | F.fuse_norm_add_relu

def close(got, want):
    return bool(np.abs(got - want).max() <= 2e-5 * max(1.0, np.abs(want).max()))

def mem(md, v=None):
    return dnnl.memory(md, eng, v) if v is not None else dnnl.memory(md, eng)

def bnorm(name, dims, t, flags=FL):
    x, z, dy = (rng.standard_normal(dims).astype(np.float32) for _ in range(3))
    C = dims[1]
    sc = rng.uniform(0.5, 1.5, C).astype(np.float32)
    sh = rng.standard_normal(C).astype(np.float32)
    md = dnnl.memory.desc(dims, dt.f32, t)
    pd = dnnl.batch_normalization_forward.primitive_desc(
        eng, PK.forward_training, md, md, EPS, flags)
    g = bool(flags & F.use_global_stats)
    gm, gv = np.full(C, 0.1, np.float32), np.full(C, 1.5, np.float32)
    n = pd.workspace_desc().get_size()
    a = {dnnl.ARG_SRC: mem(md, x), dnnl.ARG_DST: mem(md), dnnl.ARG_SRC_1: mem(md, z),
         dnnl.ARG_SCALE: mem(pd.weights_desc(), sc), dnnl.ARG_SHIFT: mem(pd.weights_desc(), sh),
         dnnl.ARG_MEAN: mem(pd.mean_desc(), gm if g else np.zeros(C, np.float32)),
         dnnl.ARG_VARIANCE: mem(pd.variance_desc(), gv if g else np.zeros(C, np.float32)),
         dnnl.ARG_WORKSPACE: mem(pd.workspace_desc(), np.zeros(n, np.uint8))}
    dnnl.batch_normalization_forward(pd).execute(s, a)
    s.wait()
    y, m, v = R.batch_norm_forward(x, EPS, gm if g else None, gv if g else None, sc, sh, add=z)
    ok = close(a[dnnl.ARG_DST].to_numpy(), y)
    mask = a[dnnl.ARG_WORKSPACE].to_numpy()[:y.size].reshape(y.shape) != 0
    ok = ok and bool((mask == (y > 0)).all())
    bpd = dnnl.batch_normalization_backward.primitive_desc(
        eng, PK.backward, md, md, md, EPS, flags, pd)
    b = {k: a[k] for k in (dnnl.ARG_SRC, dnnl.ARG_MEAN, dnnl.ARG_VARIANCE, dnnl.ARG_SCALE,
                           dnnl.ARG_SHIFT, dnnl.ARG_WORKSPACE)}
    b[dnnl.ARG_DIFF_DST] = mem(md, dy)
    b[dnnl.ARG_DIFF_SRC] = mem(md)
    b[dnnl.ARG_DIFF_SRC_1] = mem(bpd.diff_dst_desc(1))
    b[dnnl.ARG_DIFF_SCALE] = mem(bpd.diff_weights_desc())
    b[dnnl.ARG_DIFF_SHIFT] = mem(bpd.diff_weights_desc())
    dnnl.batch_normalization_backward(bpd).execute(s, b)
    s.wait()
    dx, dsc, dsh, d1 = R.batch_norm_backward_add_relu(
        x, dy, a[dnnl.ARG_MEAN].to_numpy(), a[dnnl.ARG_VARIANCE].to_numpy(), EPS, mask, sc, g)
    ok = ok and close(b[dnnl.ARG_DIFF_SRC].to_numpy(), dx)
    ok = ok and bool((b[dnnl.ARG_DIFF_SRC_1].to_numpy() == d1).all())
    ok = ok and close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc)
    ok = ok and close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), dsh)
    results[name] = bool(ok)

# the elementwise pass over plain layouts (run-time sizes) and over a blocked one (general
# kernel), then the one-kernel-per-channel path, forced
bnorm("nchw", [2, 3, 3, 5], "abcd")
bnorm("blocked_global", [2, 10, 2, 2], "aBcd8b", FL | F.use_global_stats)
from pydnnl.runtime.heuristics import normalization as rules
rules.bn_fused = lambda info, C, nbytes, run: (True, 4, False)
bnorm("fused", [2, 3, 3, 7], "abcd")
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind simulator is not installed")
def test_add_relu_kernels_clean_under_oclgrind():
    # unoptimized builds, as the other normalization probe (LLVM's freeze and Oclgrind's
    # uninitialized-value plugin)
    results = run_probe(PROBE, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results == {"nchw": True, "blocked_global": True, "fused": True}
