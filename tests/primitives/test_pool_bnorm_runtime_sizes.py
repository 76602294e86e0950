"""Batch normalization and pooling at a new minibatch or spatial size of the same plain layout
reuse their programs: the fused kernel, the elementwise pass, the split statistics (channel
reduction and finalize) and the pooling kernels take sizes and strides as arguments
(``bn_runtime_groups``, ``bn_reduce_runtime``, ``pooling.runtime_form``). Results against
pydnnl.reference; kernel requests spied on as in tests/runtime/test_runtime_sizes.py; each
run-time kernel also once under Oclgrind."""
from __future__ import annotations

import math
import pathlib
import sys

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.reference import normalization as R
from pydnnl.reference import pooling as RP

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "kernels"))
from oclgrind_helpers import has_oclgrind, run_probe  # noqa: E402

dt, tag = dnnl.memory.data_type, dnnl.memory.format_tag
F = dnnl.normalization_flags
PK = dnnl.prop_kind
EPS = 1e-3


def _mem(md, eng, v=None):
    return dnnl.memory(md, eng, v) if v is not None else dnnl.memory(md, eng)


def _close(got, want, tol=2e-5):
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


def _run_bn(eng, s, dims, t, flags, seed, backward=True):
    """Forward training (or with global statistics) and backward of one shape, checked
    against the reference."""
    rng = np.random.default_rng(seed)
    C = dims[1]
    x = (rng.standard_normal(dims) * 1.5 + 0.7).astype(np.float32)
    dy = rng.standard_normal(dims).astype(np.float32)
    sc = rng.uniform(0.5, 1.5, C).astype(np.float32)
    sh = rng.standard_normal(C).astype(np.float32)
    gm = (rng.standard_normal(C) * 0.3 + 0.7).astype(np.float32)
    gv = rng.uniform(1.0, 3.0, C).astype(np.float32)
    g, relu = bool(flags & F.use_global_stats), bool(flags & F.fuse_norm_relu)
    md = dnnl.memory.desc(dims, dt.f32, t)
    pd = dnnl.batch_normalization_forward.primitive_desc(eng, PK.forward_training, md, md,
                                                         EPS, flags)
    a = {dnnl.ARG_SRC: _mem(md, eng, x), dnnl.ARG_DST: _mem(md, eng),
         dnnl.ARG_MEAN: _mem(pd.mean_desc(), eng, gm if g else None),
         dnnl.ARG_VARIANCE: _mem(pd.variance_desc(), eng, gv if g else None),
         dnnl.ARG_SCALE: _mem(pd.weights_desc(), eng, sc),
         dnnl.ARG_SHIFT: _mem(pd.weights_desc(), eng, sh)}
    if not pd.workspace_desc().is_zero():
        a[dnnl.ARG_WORKSPACE] = _mem(pd.workspace_desc(), eng)
    dnnl.batch_normalization_forward(pd).execute(s, a)
    s.wait()
    y, m, v = R.batch_norm_forward(x, EPS, gm if g else None, gv if g else None, sc, sh, relu)
    _close(a[dnnl.ARG_DST].to_numpy(), y)
    mean, var = a[dnnl.ARG_MEAN].to_numpy(), a[dnnl.ARG_VARIANCE].to_numpy()
    if not g:
        _close(mean, m)
        _close(var, v)
    mask = y > 0 if relu else None
    if not backward:
        return pd.impl_info_str(), None
    bpd = dnnl.batch_normalization_backward.primitive_desc(eng, PK.backward, md, md, md, EPS,
                                                           flags, pd)
    b = {dnnl.ARG_SRC: a[dnnl.ARG_SRC], dnnl.ARG_MEAN: a[dnnl.ARG_MEAN],
         dnnl.ARG_VARIANCE: a[dnnl.ARG_VARIANCE], dnnl.ARG_SCALE: a[dnnl.ARG_SCALE],
         dnnl.ARG_DIFF_DST: _mem(md, eng, dy), dnnl.ARG_DIFF_SRC: _mem(md, eng),
         dnnl.ARG_DIFF_SCALE: _mem(bpd.diff_weights_desc(), eng),
         dnnl.ARG_DIFF_SHIFT: _mem(bpd.diff_weights_desc(), eng)}
    if relu:
        b[dnnl.ARG_WORKSPACE] = a[dnnl.ARG_WORKSPACE]
    dnnl.batch_normalization_backward(bpd).execute(s, b)
    s.wait()
    dx, dsc, dsh = R.batch_norm_backward(x, dy, mean, var, EPS, sc, g, mask)
    _close(b[dnnl.ARG_DIFF_SRC].to_numpy(), dx)
    _close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc)
    _close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), dsh)
    return pd.impl_info_str(), bpd.impl_info_str()


SS = F.use_scale | F.use_shift
# two shapes of one class per layout: minibatch and spatial sizes differ, neither a multiple
# of the work-groups (partial last groups), every plain kernel's launch shape the same (at
# least 256 values per channel: GPUs' reductions shrink their groups below that)
SHAPES = ([6, 4, 5, 9], [7, 4, 6, 9])


@pytest.mark.parametrize("flags", [SS, SS | F.fuse_norm_relu], ids=["ss", "ss_relu"])
def test_nchw_training_new_shape_reuses_programs(engine, stream, requested, flags):
    _run_bn(engine, stream, SHAPES[0], tag.nchw, flags, 1)
    first = set(requested)
    _run_bn(engine, stream, SHAPES[1], tag.nchw, flags, 2)
    new = {fam for fam, key in requested if (fam, key) not in first}
    assert not new, new  # the fused kernel, or the split statistics and elementwise pass


@pytest.mark.parametrize("t", [tag.nchw, tag.nhwc], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("flags", [SS | F.use_global_stats,
                                   SS | F.use_global_stats | F.fuse_norm_relu],
                         ids=["global", "global_relu"])
def test_global_stats_new_shape_reuses_programs(engine, stream, requested, t, flags):
    # forward: finalize (given statistics) and the elementwise pass, both shared
    _run_bn(engine, stream, SHAPES[0], t, flags, 3, backward=False)
    first = set(requested)
    _run_bn(engine, stream, SHAPES[1], t, flags, 4, backward=False)
    assert not {fam for fam, key in requested if (fam, key) not in first}
    # backward (diff_scale, diff_shift): the channel reduction, its finalize and the
    # elementwise pass, all shared; but nhwc's reduction with the ReLU workspace (stored in
    # nchw order, so its rows are no single run: their index would be split by run-time
    # sizes per element) keeps its sizes baked, and with them its partial count, which the
    # finalize kernel then bakes too where it follows the size (GPUs' chunks)
    _run_bn(engine, stream, SHAPES[0], t, flags, 3)
    first = set(requested)
    _run_bn(engine, stream, SHAPES[1], t, flags, 4)
    new = {fam for fam, key in requested if (fam, key) not in first}
    if t == tag.nhwc and flags & F.fuse_norm_relu:
        assert new <= {"bn_reduce", "bn_finalize"}, new
    else:
        assert not new, new


@pytest.mark.parametrize("C", [4, 5], ids=["c4", "c5"])
@pytest.mark.parametrize("t", [tag.nchw, tag.nhwc], ids=["nchw", "nhwc"])
def test_elementwise_pass_rows_per_item(engine, stream, requested, monkeypatch, t, C):
    """The elementwise pass with 4 rows per work-item (GPUs' rule, forced here): training
    with the ReLU workspace and global statistics, forward and backward, against the
    reference; rows counts not a multiple of 4 (C = 5: the row guard), and a second shape
    of the class reusing the programs."""
    from pydnnl.runtime.heuristics import normalization as rules

    monkeypatch.setattr(rules, "apply_rows_per_item", lambda info: 4)
    for flags in (SS | F.fuse_norm_relu, SS | F.use_global_stats):
        _run_bn(engine, stream, [6, C, 5, 9], t, flags, 11)
        first = set(requested)
        _run_bn(engine, stream, [7, C, 6, 9], t, flags, 12)
        new = {fam for fam, key in requested if (fam, key) not in first and fam == "bn_apply"}
        assert not new, new


@pytest.mark.parametrize("chunked", [False, True], ids=["rule", "chunks16"])
def test_nhwc_training_new_shape_results(engine, stream, requested, monkeypatch, chunked):
    """nhwc training, the split statistics: the channel reduction, the finalize kernel and
    the elementwise pass are shared by both shapes. ``chunks16``: the reduction walks chunks
    of 16 rows (70 rows: 5 chunks, the last one short; 162 rows: 11), so the chunk count
    and the partial count the finalize adds differ between the shapes."""
    from pydnnl.runtime.heuristics import normalization as rules

    if chunked:
        orig = rules.bn_reduce_params

        def sixteen(info, C, R, c_innermost):
            lanes, wg, groups = orig(info, C, R, c_innermost)
            return (lanes, wg, -(-R // 16)) if lanes == "c" else (lanes, wg, groups)

        monkeypatch.setattr(rules, "bn_reduce_params", sixteen)
    impl = _run_bn(engine, stream, SHAPES[0], tag.nhwc, SS, 5)
    first = set(requested)
    _run_bn(engine, stream, SHAPES[1], tag.nhwc, SS, 6)
    new = {fam for fam, key in requested if (fam, key) not in first}
    assert {fam for fam, _ in first} >= {"bn_reduce", "bn_finalize", "bn_apply"}, impl
    assert not new, new


# -- pooling -----------------------------------------------------------------------------------

PALG = {"max": dnnl.algorithm.pooling_max,
        "avg_include_padding": dnnl.algorithm.pooling_avg_include_padding,
        "avg_exclude_padding": dnnl.algorithm.pooling_avg_exclude_padding}


def _run_pool(eng, s, dims, t, alg, k, st, pl, pr, seed):
    """Forward training (max: with its workspace) and backward of one shape, checked against
    the reference."""
    rng = np.random.default_rng(seed)
    d = [0] * len(k)
    out = list(dims[:2]) + [RP.output_size(i, *a) for i, a in zip(dims[2:], zip(k, st, d, pl,
                                                                                 pr))]
    # distinct values: the max's winner (and its workspace index) is the reference's
    x = (rng.permutation(math.prod(dims)) * 0.25 - 3.0).reshape(dims).astype(np.float32)
    g = rng.standard_normal(out).astype(np.float32)
    sm, dm = dnnl.memory.desc(dims, dt.f32, t), dnnl.memory.desc(out, dt.f32, t)
    fpd = dnnl.pooling_forward.primitive_desc(eng, PK.forward_training, PALG[alg], sm, dm, st,
                                              k, d, pl, pr)
    a = {dnnl.ARG_SRC: _mem(sm, eng, x), dnnl.ARG_DST: _mem(dm, eng)}
    if alg == "max":
        a[dnnl.ARG_WORKSPACE] = _mem(fpd.workspace_desc(), eng)
    dnnl.pooling_forward(fpd).execute(s, a)
    s.wait()
    want, want_ws = RP.pooling_forward(x, alg, k, st, d, pl, pr)
    _close(a[dnnl.ARG_DST].to_numpy(), want)
    if alg == "max":
        np.testing.assert_array_equal(a[dnnl.ARG_WORKSPACE].to_numpy(), want_ws)
    bpd = dnnl.pooling_backward.primitive_desc(eng, PALG[alg], sm, dm, st, k, d, pl, pr, fpd)
    b = {dnnl.ARG_DIFF_DST: _mem(dm, eng, g), dnnl.ARG_DIFF_SRC: _mem(sm, eng)}
    if alg == "max":
        b[dnnl.ARG_WORKSPACE] = a[dnnl.ARG_WORKSPACE]
    dnnl.pooling_backward(bpd).execute(s, b)
    s.wait()
    _close(b[dnnl.ARG_DIFF_SRC].to_numpy(), RP.pooling_backward(g, dims, alg, k, st, d, pl, pr,
                                                                want_ws))
    return fpd.impl_info_str(), bpd.impl_info_str()


# shapes of one class per layout: a first, one of another minibatch (the rule's class on every
# device: spatial sizes stay baked, heuristics.pooling.runtime_spatial), one of another
# minibatch and image size; partial last work-groups of rows in all (row counts in one
# power-of-two range, which bounds a small problem's group); nchw keeps its width (the lanes'
# dim, baked on CPUs)
POOL = {
    "nhwc": ("acdb", [2, 3, 7, 9], [3, 3, 7, 9], [3, 3, 10, 6], [3, 3], [2, 2], [1, 1], [1, 1]),
    "nchw": ("abcd", [3, 3, 7, 9], [4, 3, 7, 9], [4, 3, 6, 9], [3, 3], [2, 2], [1, 1], [1, 1]),
    "nwc_1d": ("acb", [2, 3, 9], [3, 3, 9], [3, 3, 8], [3], [2], [1], [1]),
    # 16 channels: on CPUs groups of 16 lanes x 16 rows, and an image's 4x4 output rows are
    # one group, so the forward runs as whole groups with no row offset
    "nhwc_c16": ("acdb", [2, 16, 7, 7], [3, 16, 7, 7], [3, 16, 5, 9], [3, 3], [2, 2], [1, 1],
                 [1, 1]),
}


@pytest.mark.parametrize("spatial", [False, True], ids=["rule", "spatial"])
@pytest.mark.parametrize("alg", list(PALG))
@pytest.mark.parametrize("case", list(POOL))
def test_pooling_new_shape_reuses_programs(engine, stream, requested, monkeypatch, case, alg,
                                           spatial):
    """A new minibatch (the rule), or with ``spatial`` (the run-time spatial form, forced) a
    new minibatch and image size, asks for no pooling program the first shape did not."""
    import pydnnl.primitives.pooling as PP

    t, a, b_mb, b_sp, k, st, pl, pr = POOL[case]
    b = b_sp if spatial else b_mb
    if spatial:
        monkeypatch.setattr(PP, "runtime_spatial", lambda info: True)
    _run_pool(engine, stream, a, t, alg, k, st, pl, pr, 7)
    first = set(requested)
    _run_pool(engine, stream, b, t, alg, k, st, pl, pr, 8)
    new = {fam for fam, key in requested if (fam, key) not in first}
    assert not new, new


# the device rule (heuristics.pooling.runtime_spatial: CPUs) with new image sizes: (tag, shapes
# of one class, kernel, strides, pad_l, pad_r); nchw keeps its width (the lanes' dim, baked on
# CPUs: heuristics.pooling.runtime_lane_dim); row counts in one power-of-two range (a small
# problem's work-group rows are bounded by them)
POOL_RULE = {
    "nhwc": ("acdb", ([2, 3, 7, 9], [3, 3, 10, 6], [1, 3, 13, 12]), [3, 3], [2, 2], [1, 1],
             [1, 1]),
    "nchw": ("abcd", ([3, 3, 7, 9], [4, 3, 6, 9], [2, 3, 11, 9]), [3, 3], [2, 2], [1, 1],
             [1, 1]),
    "nhwc_s1": ("acdb", ([2, 5, 6, 7], [3, 5, 9, 4]), [3, 3], [1, 1], [1, 1], [1, 1]),
    "ncdhw": ("abcde", ([2, 3, 6, 5, 6], [2, 3, 7, 6, 6]), [2, 3, 3], [2, 2, 2], [0, 1, 1],
              [0, 1, 1]),
}


@pytest.mark.parametrize("alg", list(PALG))
@pytest.mark.parametrize("case", list(POOL_RULE))
def test_pooling_rule_new_image_size_reuses_programs(engine, stream, requested, case, alg):
    """Where the device's rule takes the spatial sizes at run time (CPUs), forward (training,
    with the workspace for max) and backward over several image sizes of one class ask for the
    first size's pooling programs only, and match the reference."""
    from pydnnl.runtime.heuristics.pooling import runtime_spatial

    if not runtime_spatial(engine.info):
        pytest.skip("this device's rule keeps the spatial sizes baked")
    t, shapes, k, st, pl, pr = POOL_RULE[case]
    first = None
    for i, dims in enumerate(shapes):
        _run_pool(engine, stream, dims, t, alg, k, st, pl, pr, 20 + i)
        pool = {key for fam, key in requested if fam == "pooling"}
        if first is None:
            first = pool
            assert 2 <= len(first) <= 4, first  # forward and backward (nchw: interior + edges)
        else:
            assert pool == first, pool - first


# -- Oclgrind ----------------------------------------------------------------------------------

PROBE = r"""
import json, math
import numpy as np
import pydnnl as dnnl
from pydnnl.reference import normalization as R
from pydnnl.reference import pooling as RP
from pydnnl.runtime import kernel_cache

eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(3)
dt, F, PK = dnnl.memory.data_type, dnnl.normalization_flags, dnnl.prop_kind
MD = dnnl.memory.desc
results = {}
seen = []
_get = kernel_cache.get_kernel
def spy(engine, family, key, build):
    seen.append((family, repr(key)))
    return _get(engine, family, key, build)
kernel_cache.get_kernel = spy
import pydnnl.runtime.plan as plan_mod
plan_mod.get_kernel = spy
# the pooling kernels' run-time spatial form (forced: no device's rule picks it now)
import pydnnl.primitives.pooling as PP
PP.runtime_spatial = lambda info: True

def close(got, want):
    return bool(np.abs(got - want).max() <= 2e-5 * max(1.0, np.abs(want).max()))

def mem(md, v=None):
    return dnnl.memory(md, eng, v) if v is not None else dnnl.memory(md, eng)

ALG = {"max": dnnl.algorithm.pooling_max,
       "avg_include_padding": dnnl.algorithm.pooling_avg_include_padding,
       "avg_exclude_padding": dnnl.algorithm.pooling_avg_exclude_padding}

def pool(dims, t, alg, k, st, pl, pr):
    d = [0] * len(k)
    out = list(dims[:2]) + [RP.output_size(i, *a) for i, a in zip(dims[2:], zip(k, st, d, pl, pr))]
    x = (rng.permutation(math.prod(dims)) * 0.25 - 3.0).reshape(dims).astype(np.float32)
    g = rng.standard_normal(out).astype(np.float32)
    sm, dm = MD(dims, dt.f32, t), MD(out, dt.f32, t)
    fpd = dnnl.pooling_forward.primitive_desc(eng, PK.forward_training, ALG[alg], sm, dm, st, k,
                                              d, pl, pr)
    a = {dnnl.ARG_SRC: mem(sm, x), dnnl.ARG_DST: mem(dm)}
    if alg == "max":
        a[dnnl.ARG_WORKSPACE] = mem(fpd.workspace_desc())
    dnnl.pooling_forward(fpd).execute(s, a)
    s.wait()
    want, want_ws = RP.pooling_forward(x, alg, k, st, d, pl, pr)
    ok = close(a[dnnl.ARG_DST].to_numpy(), want)
    bpd = dnnl.pooling_backward.primitive_desc(eng, ALG[alg], sm, dm, st, k, d, pl, pr, fpd)
    b = {dnnl.ARG_DIFF_DST: mem(dm, g), dnnl.ARG_DIFF_SRC: mem(sm)}
    if alg == "max":
        ok = ok and bool(np.array_equal(a[dnnl.ARG_WORKSPACE].to_numpy(), want_ws))
        # the workspace written by the host (see the reorder probe on Oclgrind's shadow state)
        b[dnnl.ARG_WORKSPACE] = mem(fpd.workspace_desc(), a[dnnl.ARG_WORKSPACE].to_numpy())
    dnnl.pooling_backward(bpd).execute(s, b)
    s.wait()
    return ok and close(b[dnnl.ARG_DIFF_SRC].to_numpy(),
                        RP.pooling_backward(g, dims, alg, k, st, d, pl, pr, want_ws))

def two(name, fn, first, second):
    ok = fn(*first)
    before = set(seen)
    ok = fn(*second) and ok
    results[name] = bool(ok)
    results[name + "_new"] = sorted({f for f, k in seen if (f, k) not in before})

K3 = ([3, 3], [2, 2], [1, 1], [1, 1])
two("pool_max_nhwc", pool, ([2, 3, 5, 7], "acdb", "max") + K3, ([3, 3, 6, 5], "acdb", "max") + K3)
# the simulator counts as a GPU: nchw's width too at run time
two("pool_avg_np_nchw", pool, ([2, 2, 5, 7], "abcd", "avg_exclude_padding") + K3,
    ([1, 2, 9, 5], "abcd", "avg_exclude_padding") + K3)
two("pool_avg_p_ncw", pool, ([2, 2, 9], "abc", "avg_include_padding", [3], [2], [1], [1]),
    ([3, 2, 11], "abc", "avg_include_padding", [3], [2], [1], [1]))
# the CPU's interior + edge kernels (forced) with a run-time width: the interior's end an
# argument
import pydnnl.primitives.pooling as PP
PP.split_interior = lambda info: True
two("pool_interior_max", pool, ([1, 1, 5, 38], "abcd", "max") + K3,
    ([1, 1, 6, 42], "abcd", "max") + K3)

def bnorm(dims, t, flags):
    x = (rng.standard_normal(dims) * 1.5 + 0.7).astype(np.float32)
    dy = rng.standard_normal(dims).astype(np.float32)
    C = dims[1]
    sc = rng.uniform(0.5, 1.5, C).astype(np.float32)
    sh = rng.standard_normal(C).astype(np.float32)
    md = MD(dims, dt.f32, t)
    pd = dnnl.batch_normalization_forward.primitive_desc(eng, PK.forward_training, md, md,
                                                         1e-3, flags)
    g = bool(flags & F.use_global_stats)
    gm, gv = np.full(C, 0.1, np.float32), np.full(C, 1.5, np.float32)
    a = {dnnl.ARG_SRC: mem(md, x), dnnl.ARG_DST: mem(md),
         dnnl.ARG_SCALE: mem(pd.weights_desc(), sc), dnnl.ARG_SHIFT: mem(pd.weights_desc(), sh),
         dnnl.ARG_MEAN: mem(pd.mean_desc(), gm if g else np.zeros(C, np.float32)),
         dnnl.ARG_VARIANCE: mem(pd.variance_desc(), gv if g else np.zeros(C, np.float32))}
    dnnl.batch_normalization_forward(pd).execute(s, a)
    s.wait()
    y, m, v = R.batch_norm_forward(x, 1e-3, gm if g else None, gv if g else None, sc, sh, False)
    ok = close(a[dnnl.ARG_DST].to_numpy(), y)
    if not g:
        ok = ok and close(a[dnnl.ARG_MEAN].to_numpy(), m)
        ok = ok and close(a[dnnl.ARG_VARIANCE].to_numpy(), v)
    bpd = dnnl.batch_normalization_backward.primitive_desc(eng, PK.backward, md, md, md, 1e-3,
                                                           flags, pd)
    b = {k: a[k] for k in (dnnl.ARG_SRC, dnnl.ARG_MEAN, dnnl.ARG_VARIANCE, dnnl.ARG_SCALE)}
    b.update({dnnl.ARG_DIFF_DST: mem(md, dy), dnnl.ARG_DIFF_SRC: mem(md),
              dnnl.ARG_DIFF_SCALE: mem(bpd.diff_weights_desc()),
              dnnl.ARG_DIFF_SHIFT: mem(bpd.diff_weights_desc())})
    dnnl.batch_normalization_backward(bpd).execute(s, b)
    s.wait()
    dx, dsc, dsh = R.batch_norm_backward(x, dy, a[dnnl.ARG_MEAN].to_numpy(),
                                         a[dnnl.ARG_VARIANCE].to_numpy(), 1e-3, sc, g, None)
    ok = ok and close(b[dnnl.ARG_DIFF_SRC].to_numpy(), dx)
    ok = ok and close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc)
    return ok and close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), dsh)

SS = F.use_scale | F.use_shift
# one row per work-item in the elementwise pass (the simulator counts as a GPU, whose 4 rows
# per work-item would give these small shapes different groups of rows)
from pydnnl.runtime.heuristics import normalization as rules
rules.apply_rows_per_item = lambda info: 1
# the split statistics of nhwc training: channel lanes, chunks of 4 rows (forced; the last
# one short), the finalize adding 18 and 19 partials (at least 64 rows each: the elementwise
# pass's group of rows is the same)
from pydnnl.runtime.heuristics import normalization as rules
orig = rules.bn_reduce_params
rules.bn_reduce_params = lambda info, C, R, ci: (
    (lambda l, w, g: (l, w, -(-R // 4) if l == "c" else g))(*orig(info, C, R, ci)))
two("bn_split_nhwc", bnorm, ([2, 3, 6, 6], "acdb", SS), ([3, 3, 5, 5], "acdb", SS))
# the runs reduction (lanes along the spatial run; nchw, unfused), its lanes summed in local
# memory (the GPU's) and not; 18 and 21 rows of 15 and 14 (the same groups in both passes)
rules.bn_fused = lambda info, C, nbytes, run: (False, 16, False)
two("bn_split_nchw_tree", bnorm, ([6, 3, 3, 5], "abcd", SS), ([7, 3, 2, 7], "abcd", SS))
rules.bn_reduce_tree = lambda info, lanes: False
two("bn_split_nchw", bnorm, ([6, 3, 3, 5], "abcd", SS), ([7, 3, 2, 7], "abcd", SS))
# the elementwise pass with 4 rows per work-item (the GPUs'), 3 channels: the row guard;
# 63 and 66 rows (16 groups of rows of 4, the same in both)
rules.apply_rows_per_item = lambda info: 4
two("bn_rows4", bnorm, ([21, 3, 3, 5], "abcd", SS), ([22, 3, 2, 7], "abcd", SS))
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind simulator is not installed")
def test_runtime_size_kernels_clean_under_oclgrind():
    # unoptimized builds, as the other probes (LLVM's freeze instructions and Oclgrind's
    # uninitialized-value plugin)
    results = run_probe(PROBE, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    names = ("pool_max_nhwc", "pool_avg_np_nchw", "pool_avg_p_ncw", "pool_interior_max",
             "bn_split_nhwc", "bn_split_nchw_tree", "bn_split_nchw", "bn_rows4")
    # results right, and the second shape of each pair asks for no kernel the first did not
    assert results == {**{n: True for n in names}, **{n + "_new": [] for n in names}}
