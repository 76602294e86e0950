"""Softmax, layer normalization and reduction with their outer counts as kernel arguments: a
new minibatch (or sequence length, where it is not the softmax axis or the normalized row) of
one layout class creates its primitive from the programs of the first, and computes the same
as the float64 numpy references. Sizes leave the last work-group partial where the kernel has
several rows per work-group."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels import normalization as KN
from pydnnl.kernels import reduction as KR
from pydnnl.kernels import softmax as KS
from pydnnl.reference import normalization as RN
from pydnnl.reference import reduction as RR
from pydnnl.reference import softmax as RS

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "kernels"))
sys.path.insert(0, str(pathlib.Path(__file__).parent))
from norm_helpers import ln_data  # noqa: E402
from oclgrind_helpers import has_oclgrind, run_probe  # noqa: E402

A = dnnl.algorithm
dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
F = dnnl.normalization_flags
EPS = 1e-5


def _x(seed, dims, lo=-3.0, hi=3.0):
    return np.random.default_rng(seed).uniform(lo, hi, dims).astype(np.float32)


def _close(got, want, rtol=2e-5, atol=2e-6):
    """The softmax tests' tolerance (tests/primitives/test_softmax.py)."""
    err = np.abs(np.asarray(got, np.float64) - want)
    bad = ~(err <= rtol * np.abs(want) + atol)
    assert not bad.any(), f"max err {err.max():.3g} at {np.argwhere(bad)[:3].tolist()}"


def _same_class(requested, first):
    new = set(requested) - first
    assert not new, sorted(new)


# -- softmax -------------------------------------------------------------------------------------
def _softmax(engine, stream, alg, x, axis, t, dd):
    md = dnnl.memory.desc(list(x.shape), dt.f32, t)
    fpd = dnnl.softmax_forward.primitive_desc(engine, dnnl.prop_kind.forward_training, alg, md,
                                              md, axis)
    src, dst = dnnl.memory(md, engine, x), dnnl.memory(md, engine)
    dnnl.softmax_forward(fpd).execute(stream, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    stream.wait()
    y = dst.to_numpy()
    bpd = dnnl.softmax_backward.primitive_desc(engine, alg, md, md, md, axis, fpd)
    ds = dnnl.memory(md, engine)
    dnnl.softmax_backward(bpd).execute(stream, {dnnl.ARG_DST: dst, dnnl.ARG_DIFF_SRC: ds,
                                                dnnl.ARG_DIFF_DST: dnnl.memory(md, engine, dd)})
    stream.wait()
    return y, ds.to_numpy(), fpd.impl_info_str()


# (tag, axis, first dims, second dims): a new minibatch (and, where folded into the rows, a new
# sequence length) of one class
SOFTMAX_CLASSES = {
    "row_2d": ("ab", 1, (3, 70), (7, 70)),
    "row_3d_folded": ("abc", 2, (2, 3, 40), (3, 5, 40)),   # rows of batch x sequence
    "strided_nchw": ("abcd", 1, (2, 5, 3, 7), (3, 5, 3, 7)),  # 42 / 63 rows: partial groups
    "strided_vec_nchw": ("abcd", 1, (2, 5, 4, 8), (5, 5, 4, 8)),  # vector rows of 32
    "strided_blocked": ("aBcd16b", 3, (2, 20, 2, 3), (3, 20, 2, 3)),
}


@pytest.mark.parametrize("alg", [A.softmax_accurate, A.softmax_log], ids=["accurate", "log"])
@pytest.mark.parametrize("case", list(SOFTMAX_CLASSES))
def test_softmax_new_outer_count_needs_no_new_kernel(engine, stream, requested, case, alg):
    t, axis, d0, d1 = SOFTMAX_CLASSES[case]
    first = None
    for k, dims in enumerate((d0, d1)):
        x, dd = _x(1 + k, dims), _x(5 + k, dims, -1, 1)
        y, ds, _impl = _softmax(engine, stream, alg, x, axis, t, dd)
        _close(y, RS.softmax_forward(alg, x, axis))
        _close(ds, RS.softmax_backward(alg, dd, y, axis), atol=1e-5)
        if first is None:
            first = set(requested)
            assert first
            requested.clear()
    _same_class(requested, first)


def test_softmax_runtime_form_keeps_the_axis_baked():
    lay = lambda *st: (0, tuple((1, s, ()) for s in st))  # noqa: E731
    p = KS.SoftmaxProblem(log=False, backward=False, dims=(6, 40), axis=1,
                          layouts=(lay(40, 1), lay(40, 1)))
    q, values = KS.runtime_form(p)
    assert values == {"sm_outer": 6} and q.dims[1] == 40 and q.layouts == p.layouts
    src = KS.build_softmax(q)
    assert src.global_size is None and "sm_outer" in src.arg_names
    # the axis outermost: nothing run-time
    p = KS.SoftmaxProblem(log=False, backward=False, dims=(40, 6), axis=0,
                          layouts=(lay(6, 1), lay(6, 1)), variant="strided")
    assert KS.runtime_form(p) == (p, {})


# -- reduction -----------------------------------------------------------------------------------
def _reduction(engine, stream, alg, x, dst_dims, t):
    smd = dnnl.memory.desc(list(x.shape), dt.f32, t)
    dmd = dnnl.memory.desc(list(dst_dims), dt.f32, tag.any)
    pd = dnnl.reduction.primitive_desc(engine, alg, smd, dmd, 2.0, 0.0)
    dst = dnnl.memory(pd.dst_desc(), engine)
    dnnl.reduction(pd).execute(stream, {dnnl.ARG_SRC: dnnl.memory(smd, engine, x),
                                        dnnl.ARG_DST: dst})
    stream.wait()
    return dst.to_numpy(), pd


# (tag, (src, dst) first, (src, dst) second): the outermost folded dim kept and run-time
REDUCTION_CLASSES = {
    # innermost reduced, contiguous: a work-item per output with vector loads on CPUs
    "inner_rows": ("abcd", ((64, 16, 3, 3), (64, 16, 1, 1)), ((70, 16, 3, 3), (70, 16, 1, 1))),
    # a middle dim reduced: a work-item per output walking it (45 / 105 outputs)
    "middle_strided": ("abc", ((3, 37, 15), (3, 1, 15)), ((7, 37, 15), (7, 1, 15))),
    # a middle dim reduced, 16 adjacent outputs per work-item (80 / 90 vectors)
    "middle_vec": ("abc", ((40, 5, 32), (40, 1, 32)), ((45, 5, 32), (45, 1, 32))),
    # blocked channels reduced: a work-group per output on CPUs
    "blocked_channels": ("aBcd16b", ((8, 64, 2, 2), (8, 1, 2, 2)),
                         ((11, 64, 2, 2), (11, 1, 2, 2))),
}


@pytest.mark.parametrize("alg", [A.reduction_mean, A.reduction_max, A.reduction_norm_lp_sum],
                         ids=["mean", "max", "norm_lp_sum"])
@pytest.mark.parametrize("case", list(REDUCTION_CLASSES))
def test_reduction_new_outer_count_needs_no_new_kernel(engine, stream, requested, case, alg):
    t, (s0, d0), (s1, d1) = REDUCTION_CLASSES[case]
    got = []
    for k, (sd, dd) in enumerate(((s0, d0), (s1, d1))):
        x = _x(11 + k, sd)
        y, pd = _reduction(engine, stream, alg, x, dd, t)
        _close(y, RR.reduction(alg, x, dd, 2.0, 0.0), rtol=3e-5, atol=1e-6)
        got.append(pd)
        if k == 0:
            first = set(requested)
            assert first
            requested.clear()
    a, b = (pd._stages for pd in got)
    if len(a) != 1 or (a[0].wg, a[0].splits, a[0].variant) != (b[0].wg, b[0].splits,
                                                                 b[0].variant):
        pytest.skip("this device's rules put the two shapes in different launch classes")
    _same_class(requested, first)


def test_reduction_runtime_form_keeps_reduced_and_split_problems_baked():
    lay = lambda *st: (0, tuple((1, s, ()) for s in st))  # noqa: E731
    p = KR.ReductionProblem(alg="sum", p=1.0, eps=0.0, dims=(4, 49), reduced=(False, True),
                            src=lay(49, 1), dst=lay(1, 0), variant="vrow", vec=8)
    q, values = KR.runtime_form(p)
    assert values == {"red_outer": 4} and q.dims[1] == 49
    assert "red_outer" in KR.build_reduction(q).arg_names
    # the outermost dim reduced (16x64x128x128 -> 1x64x1x1): the reduced extent stays baked
    r = KR.ReductionProblem(alg="mean", p=1.0, eps=0.0, dims=(16, 64, 9), reduced=(True, False,
                            True), src=lay(576, 9, 1), dst=lay(0, 1, 0), variant="strided")
    assert KR.runtime_form(r) == (r, {})
    # chunked reductions (the chunk count comes from the output count)
    s = KR.ReductionProblem(alg="sum", p=1.0, eps=0.0, dims=(4, 49), reduced=(False, True),
                            src=lay(49, 1), dst=lay(1, 0), splits=2, stage="partial")
    assert KR.runtime_form(s) == (s, {})


# -- layer normalization -------------------------------------------------------------------------
def _lnorm(engine, stream, d, t, flags, prop=dnnl.prop_kind.backward):
    dims = d["x"].shape
    md = dnnl.memory.desc(list(dims), dt.f32, t)
    vm = dnnl.memory.desc([dims[-1]], dt.f32, tag.a)
    fpd = dnnl.layer_normalization_forward.primitive_desc(
        engine, dnnl.prop_kind.forward_training, md, md, EPS, flags)
    mem = lambda m, v=None: dnnl.memory(m, engine, v) if v is not None else dnnl.memory(m, engine)  # noqa: E731,E501
    src, dst = mem(md, d["x"]), mem(md)
    mean, var = mem(fpd.mean_desc()), mem(fpd.variance_desc())
    sc, sh = mem(vm, d["scale"]), mem(vm, d["shift"])
    dnnl.layer_normalization_forward(fpd).execute(stream, {
        dnnl.ARG_SRC: src, dnnl.ARG_DST: dst, dnnl.ARG_MEAN: mean, dnnl.ARG_VARIANCE: var,
        dnnl.ARG_SCALE: sc, dnnl.ARG_SHIFT: sh})
    stream.wait()
    out = {"y": dst.to_numpy(), "mean": mean.to_numpy(), "var": var.to_numpy()}
    bpd = dnnl.layer_normalization_backward.primitive_desc(engine, prop, md, md, md, EPS, flags,
                                                           fpd)
    dsrc, dsc, dsh = mem(md), mem(vm), mem(vm)
    args = {dnnl.ARG_SRC: src, dnnl.ARG_DIFF_DST: mem(md, d["dy"]), dnnl.ARG_MEAN: mean,
            dnnl.ARG_VARIANCE: var, dnnl.ARG_SCALE: sc, dnnl.ARG_SHIFT: sh,
            dnnl.ARG_DIFF_SRC: dsrc}
    if prop == dnnl.prop_kind.backward:
        args.update({dnnl.ARG_DIFF_SCALE: dsc, dnnl.ARG_DIFF_SHIFT: dsh})
    dnnl.layer_normalization_backward(bpd).execute(stream, args)
    stream.wait()
    out.update(dx=dsrc.to_numpy(), dscale=dsc.to_numpy(), dshift=dsh.to_numpy())
    return out


def _ln_close(got, want, tol=2e-5):
    """tests/primitives/test_layer_normalization.py's tolerance."""
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


# (tag, first dims, second dims): batch x sequence rows of one row length; 80 and 150 rows
# (more than one chunk of the fused scale/shift gradient, the last partial)
LNORM_CLASSES = {
    "3d": ("abc", (4, 20, 24), (5, 30, 24)),
    "2d": ("ab", (80, 40), (150, 40)),
}


@pytest.mark.parametrize("prop", [dnnl.prop_kind.backward, dnnl.prop_kind.backward_data],
                         ids=["bwd", "bwd_data"])
@pytest.mark.parametrize("case", list(LNORM_CLASSES))
def test_layer_norm_new_row_count_needs_no_new_kernel(engine, stream, requested, case, prop):
    t, d0, d1 = LNORM_CLASSES[case]
    flags = F.use_scale | F.use_shift
    first = None
    for k, dims in enumerate((d0, d1)):
        d = ln_data(dims, 20 + k)
        got = _lnorm(engine, stream, d, t, flags, prop)
        y, mean, var = RN.layer_norm_forward(d["x"], EPS, scale=d["scale"], shift=d["shift"])
        _ln_close(got["y"], y)
        _ln_close(got["mean"], mean)
        _ln_close(got["var"], var)
        dx, dscale, dshift = RN.layer_norm_backward(d["x"], d["dy"], got["mean"], got["var"],
                                                    EPS, scale=d["scale"])
        _ln_close(got["dx"], dx)
        if prop == dnnl.prop_kind.backward:
            _ln_close(got["dscale"], dscale, 1e-4)
            _ln_close(got["dshift"], dshift, 1e-4)
        if first is None:
            first = set(requested)
            assert first
            requested.clear()
    _same_class(requested, first)


@pytest.mark.parametrize("case", list(LNORM_CLASSES))
def test_layer_norm_reduce_path_new_row_count_needs_no_new_kernel(engine, stream, requested,
                                                                  monkeypatch, case):
    """The scale/shift gradient as a reduce kernel over chunks of rows and a finalize (GPUs'
    rule; forced here on every device): both take the row count and the chunk count at run
    time, so a new row count reuses them; the gradients against the reference."""
    from pydnnl.runtime.heuristics import normalization as rules

    monkeypatch.setattr(rules, "ln_bwd_fused_ss", lambda info, cache, wg=0: False)
    t, d0, d1 = LNORM_CLASSES[case]
    first = None
    for k, dims in enumerate((d0, d1)):
        d = ln_data(dims, 40 + k)
        got = _lnorm(engine, stream, d, t, F.use_scale | F.use_shift, dnnl.prop_kind.backward)
        dx, dscale, dshift = RN.layer_norm_backward(d["x"], d["dy"], got["mean"], got["var"],
                                                    EPS, scale=d["scale"])
        _ln_close(got["dx"], dx)
        _ln_close(got["dscale"], dscale, 1e-4)
        _ln_close(got["dshift"], dshift, 1e-4)
        if first is None:
            first = set(requested)
            assert any(fam == "ln_ss_reduce" for fam, _ in first), first
            requested.clear()
    _same_class(requested, first)


def test_layer_norm_runtime_form_needs_chained_leading_dims():
    lay = lambda *st: (0, tuple((1, s, ()) for s in st))  # noqa: E731
    p = KN.LnRows(dims=(3, 5, 8), x=lay(40, 8, 1), out=lay(40, 8, 1), stat=lay(5, 1),
                  var=lay(5, 1), eps=EPS)
    q, values = KN.ln_runtime_form(p)
    assert values == {"nrows": 15} and q.dims[1] == 8
    assert q.x == lay(8, 1) and q.stat == lay(1)
    assert "nrows" in KN.build_ln_fwd(q).arg_names
    # tnc data with ntc-ordered statistics... and a permuted (sequence-major) src: baked
    r = KN.LnRows(dims=(3, 5, 8), x=lay(8, 24, 1), out=lay(8, 24, 1), stat=lay(5, 1),
                  var=lay(5, 1), eps=EPS)
    assert KN.ln_runtime_form(r) == (r, {})


# -- the run-time kernels under Oclgrind --------------------------------------------------------
PROBE = r"""
import json
import numpy as np
import pydnnl as dnnl
from pydnnl.reference import normalization as RN, reduction as RR, softmax as RS

MD, F32, A = dnnl.memory.desc, dnnl.memory.data_type.f32, dnnl.algorithm
eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(7)
results = {}

def close(got, want, rtol=2e-5, atol=2e-6):
    return bool(np.allclose(got, want, rtol=rtol, atol=atol))

def mem(md, a=None):
    return dnnl.memory(md, eng, a) if a is not None else dnnl.memory(md, eng)

def softmax(name, dims, axis, tag, variant):
    alg = A.softmax_accurate
    x = rng.uniform(-3, 3, dims).astype(np.float32)
    md = MD(dims, F32, tag)
    fpd = dnnl.softmax_forward.primitive_desc(eng, dnnl.prop_kind.forward_training, alg, md,
                                              md, axis)
    src, dst = mem(md, x), mem(md)
    dnnl.softmax_forward(fpd).execute(s, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    s.wait()
    y = dst.to_numpy()
    dd = rng.uniform(-1, 1, dims).astype(np.float32)
    bpd = dnnl.softmax_backward.primitive_desc(eng, alg, md, md, md, axis, fpd)
    ds = mem(md)
    dnnl.softmax_backward(bpd).execute(s, {dnnl.ARG_DST: dst, dnnl.ARG_DIFF_DST: mem(md, dd),
                                           dnnl.ARG_DIFF_SRC: ds})
    s.wait()
    results[name] = (fpd.impl_info_str().endswith(variant)
                     and close(y, RS.softmax_forward(alg, x, axis))
                     and close(ds.to_numpy(), RS.softmax_backward(alg, dd, y, axis), atol=1e-5))

softmax("softmax_row", (3, 40), 1, "ab", "row")
softmax("softmax_strided", (3, 5, 3, 7), 1, "abcd", "strided")

def reduction(name, sd, dd, tag, alg=A.reduction_sum):
    x = rng.uniform(-3, 3, sd).astype(np.float32)
    smd = MD(sd, F32, tag)
    pd = dnnl.reduction.primitive_desc(eng, alg, smd, MD(dd, F32, "any"), 1.0, 0.0)
    dst = mem(pd.dst_desc())
    dnnl.reduction(pd).execute(s, {dnnl.ARG_SRC: mem(smd, x), dnnl.ARG_DST: dst})
    s.wait()
    results[name] = (len(pd._stages) == 1
                     and close(dst.to_numpy(), RR.reduction(alg, x, dd, 1.0, 0.0), 3e-5, 1e-5))

reduction("reduction_vrow", (40, 3, 9), (40, 3, 1), "abc", A.reduction_mean)
reduction("reduction_strided", (35, 5, 3), (35, 1, 3), "abc")
reduction("reduction_row_blocked", (9, 64, 2, 1), (9, 1, 2, 1), "aBcd16b", A.reduction_max)

def lnorm(name, dims):
    C = dims[-1]
    x = rng.standard_normal(dims).astype(np.float32)
    g = rng.uniform(0.5, 1.5, C).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    dy = rng.standard_normal(dims).astype(np.float32)
    md, vm = MD(dims, F32, "abc"), MD([C], F32, "a")
    flags = dnnl.normalization_flags.use_scale | dnnl.normalization_flags.use_shift
    fpd = dnnl.layer_normalization_forward.primitive_desc(
        eng, dnnl.prop_kind.forward_training, md, md, 1e-5, flags)
    src, dst = mem(md, x), mem(md)
    mean, var = mem(fpd.mean_desc()), mem(fpd.variance_desc())
    sc, sh = mem(vm, g), mem(vm, b)
    dnnl.layer_normalization_forward(fpd).execute(s, {
        dnnl.ARG_SRC: src, dnnl.ARG_DST: dst, dnnl.ARG_MEAN: mean, dnnl.ARG_VARIANCE: var,
        dnnl.ARG_SCALE: sc, dnnl.ARG_SHIFT: sh})
    s.wait()
    y, m, v = RN.layer_norm_forward(x, 1e-5, scale=g, shift=b)
    ok = close(dst.to_numpy(), y, 1e-4, 1e-4)
    bpd = dnnl.layer_normalization_backward.primitive_desc(
        eng, dnnl.prop_kind.backward, md, md, md, 1e-5, flags, fpd)
    dx, dsc, dsh = mem(md), mem(vm), mem(vm)
    dnnl.layer_normalization_backward(bpd).execute(s, {
        dnnl.ARG_SRC: src, dnnl.ARG_DIFF_DST: mem(md, dy), dnnl.ARG_MEAN: mean,
        dnnl.ARG_VARIANCE: var, dnnl.ARG_SCALE: sc, dnnl.ARG_SHIFT: sh,
        dnnl.ARG_DIFF_SRC: dx, dnnl.ARG_DIFF_SCALE: dsc, dnnl.ARG_DIFF_SHIFT: dsh})
    s.wait()
    rdx, rdsc, rdsh = RN.layer_norm_backward(x, dy, mean.to_numpy(), var.to_numpy(), 1e-5,
                                             scale=g)
    results[name] = (ok and close(dx.to_numpy(), rdx, 1e-4, 1e-4)
                     and close(dsc.to_numpy(), rdsc, 1e-4, 1e-4)
                     and close(dsh.to_numpy(), rdsh, 1e-4, 1e-4))

lnorm("lnorm", (2, 5, 20))
# the GPUs' scale/shift gradient (a reduce kernel over chunks of rows, then a finalize),
# forced here: both take the row and chunk counts at run time
import pydnnl.runtime.heuristics.normalization as _rules
_rules.ln_bwd_fused_ss = lambda info, cache, wg=0: False
lnorm("lnorm_reduce", (3, 7, 20))
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="Oclgrind OpenCL platform not installed")
def test_runtime_size_kernels_under_oclgrind():
    results = run_probe(PROBE, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results and all(results.values()), results


# -- softmax axis length at run time --------------------------------------------------------------
# (tag, axis, shapes): one class per kernel shape, the axis length (and the outer count) new in
# each shape; every length keeps the rule's kernel shape and work-group (row kernels: 32 values
# or more, 16 work-items on CPUs, 32 on GPUs below 512 values; strided: under 32), so all
# share one program per direction
SOFTMAX_AXIS_CLASSES = {
    "row_2d": ("ab", 1, ((3, 70), (5, 90), (2, 250))),
    "row_4d_last": ("abcd", 3, ((2, 3, 4, 40), (1, 3, 4, 77))),
    "row_nhwc_channels": ("acdb", 1, ((2, 40, 3, 5), (3, 57, 3, 5))),
    "strided_nchw": ("abcd", 1, ((2, 5, 3, 7), (3, 9, 3, 7), (2, 3, 3, 7))),
    "strided_vec_nchw": ("abcd", 1, ((2, 5, 4, 8), (3, 11, 4, 8))),
}


@pytest.mark.parametrize("alg", [A.softmax_accurate, A.softmax_log], ids=["accurate", "log"])
@pytest.mark.parametrize("case", list(SOFTMAX_AXIS_CLASSES))
def test_softmax_new_axis_length_needs_no_new_kernel(engine, stream, requested, case, alg):
    """Forward and backward over several axis lengths of one class: the first shape's
    programs (one forward, one backward softmax kernel) serve the others, and each result
    matches the reference."""
    t, axis, shapes = SOFTMAX_AXIS_CLASSES[case]
    first = None
    for k, dims in enumerate(shapes):
        x, dd = _x(21 + k, dims), _x(31 + k, dims, -1, 1)
        y, ds, _impl = _softmax(engine, stream, alg, x, axis, t, dd)
        _close(y, RS.softmax_forward(alg, x, axis))
        _close(ds, RS.softmax_backward(alg, dd, y, axis), atol=1e-5)
        if first is None:
            first = set(requested)
            assert len({key for fam, key in first if fam == "softmax"}) == 2, first
            requested.clear()
    _same_class(requested, first)


def test_softmax_runtime_form_axis():
    lay = lambda *st: (0, tuple((1, s, ()) for s in st))  # noqa: E731
    p = KS.SoftmaxProblem(log=False, backward=False, dims=(6, 40), axis=1,
                          layouts=(lay(40, 1), lay(40, 1)))
    q, values = KS.runtime_form(p, axis=True)
    assert values == {"sm_outer": 6, "sm_axis": 40}
    assert str(q.layouts[0][1][0][1]) == "sm_axis"
    src = KS.build_softmax(q)
    assert src.global_size is None and {"sm_outer", "sm_axis"} <= set(src.arg_names)
    assert "c < sm_axis" in src.source
    # the axis outermost (strided, 40 x 6): the axis alone run-time, no stride follows it
    p = KS.SoftmaxProblem(log=False, backward=False, dims=(40, 6), axis=0,
                          layouts=(lay(6, 1), lay(6, 1)), variant="strided")
    q, values = KS.runtime_form(p, axis=True)
    assert values == {"sm_axis": 40} and q.layouts == p.layouts
    assert KS.build_softmax(q).global_size is None
    # a padded (not dense) layout keeps the axis baked
    p = KS.SoftmaxProblem(log=False, backward=False, dims=(6, 40), axis=1,
                          layouts=(lay(48, 1), lay(40, 1)))
    q, values = KS.runtime_form(p, axis=True)
    assert values == {"sm_outer": 6} and q.dims[1] == 40
