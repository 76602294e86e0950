"""Batch and layer normalization kernels under the Oclgrind simulator: no out-of-bounds
access, no uninitialized read, no data race, no API misuse, and right results. Every kernel
of the family runs on tiny shapes: the bnorm reduction (runs path, with one partial per lane
and with the lanes summed in local memory, and channel-lanes path,
forward and backward with the ReLU workspace), finalize (computed, given, backward) and the
elementwise pass (runs path and the general path of blocked layouts); the lnorm row kernels
(reading the row twice, and keeping it in registers as on GPUs) and the scale/shift gradient
kernels; the one-kernel-per-channel batch normalization (forward and backward); the bnorm
elementwise pass walking runs in float vectors and the channels-innermost reduction per
block of channels; the lnorm backward walking chunks of rows in float vectors; the lnorm
backward rows summing diff_scale/diff_shift as they go."""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import has_oclgrind, run_probe  # noqa: E402

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

def close(got, want):
    return bool(np.abs(got - want).max() <= 2e-5 * max(1.0, np.abs(want).max()))

def mem(md, v=None):
    return dnnl.memory(md, eng, v) if v is not None else dnnl.memory(md, eng)

def bnorm(name, dims, t, flags):
    x = rng.standard_normal(dims).astype(np.float32)
    dy = rng.standard_normal(dims).astype(np.float32)
    C = dims[1]
    sc = rng.uniform(0.5, 1.5, C).astype(np.float32)
    sh = rng.standard_normal(C).astype(np.float32)
    md = dnnl.memory.desc(dims, dt.f32, t)
    pd = dnnl.batch_normalization_forward.primitive_desc(
        eng, PK.forward_training, md, md, EPS, flags)
    a = {dnnl.ARG_SRC: mem(md, x), dnnl.ARG_DST: mem(md),
         dnnl.ARG_SCALE: mem(pd.weights_desc(), sc), dnnl.ARG_SHIFT: mem(pd.weights_desc(), sh)}
    g = bool(flags & F.use_global_stats)
    gm, gv = np.full(C, 0.1, np.float32), np.full(C, 1.5, np.float32)
    a[dnnl.ARG_MEAN] = mem(pd.mean_desc(), gm if g else np.zeros(C, np.float32))
    a[dnnl.ARG_VARIANCE] = mem(pd.variance_desc(), gv if g else np.zeros(C, np.float32))
    relu = bool(flags & F.fuse_norm_relu)
    if relu:
        n = pd.workspace_desc().get_size()
        a[dnnl.ARG_WORKSPACE] = mem(pd.workspace_desc(), np.zeros(n, np.uint8))
    dnnl.batch_normalization_forward(pd).execute(s, a)
    s.wait()
    y, m, v = R.batch_norm_forward(x, EPS, gm if g else None, gv if g else None, sc, sh, relu)
    ok = close(a[dnnl.ARG_DST].to_numpy(), y)
    bpd = dnnl.batch_normalization_backward.primitive_desc(
        eng, PK.backward, md, md, md, EPS, flags, pd)
    b = {k: a[k] for k in (dnnl.ARG_SRC, dnnl.ARG_MEAN, dnnl.ARG_VARIANCE, dnnl.ARG_SCALE,
                           dnnl.ARG_SHIFT, dnnl.ARG_WORKSPACE) if k in a}
    b[dnnl.ARG_DIFF_DST] = mem(md, dy)
    b[dnnl.ARG_DIFF_SRC] = mem(md)
    b[dnnl.ARG_DIFF_SCALE] = mem(bpd.diff_weights_desc())
    b[dnnl.ARG_DIFF_SHIFT] = mem(bpd.diff_weights_desc())
    dnnl.batch_normalization_backward(bpd).execute(s, b)
    s.wait()
    mean, var = a[dnnl.ARG_MEAN].to_numpy(), a[dnnl.ARG_VARIANCE].to_numpy()
    dx, dsc, dsh = R.batch_norm_backward(x, dy, mean, var, EPS, sc, g, y > 0 if relu else None)
    ok = ok and close(b[dnnl.ARG_DIFF_SRC].to_numpy(), dx)
    ok = ok and close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc)
    ok = ok and close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), dsh)
    results[name] = bool(ok)

both = F.use_scale | F.use_shift
bnorm("bn_nchw_relu", [2, 3, 3, 5], "abcd", both | F.fuse_norm_relu)
bnorm("bn_nhwc", [2, 5, 2, 3], "acdb", both)
# plain layouts run the elementwise pass with sizes as arguments: a second shape of the class
# (another minibatch and spatial size, a partial last work-group) through the same program
bnorm("bn_nhwc_shape2", [3, 5, 3, 2], "acdb", both)
bnorm("bn_blocked_global", [2, 10, 2, 2], "aBcd8b", both | F.use_global_stats)

def lnorm(name, dims, t, flags):
    x = rng.standard_normal(dims).astype(np.float32)
    dy = rng.standard_normal(dims).astype(np.float32)
    C = dims[-1]
    sc = rng.uniform(0.5, 1.5, C).astype(np.float32)
    sh = rng.standard_normal(C).astype(np.float32)
    md = dnnl.memory.desc(dims, dt.f32, t)
    pd = dnnl.layer_normalization_forward.primitive_desc(
        eng, PK.forward_training, md, md, EPS, flags)
    a = {dnnl.ARG_SRC: mem(md, x), dnnl.ARG_DST: mem(md),
         dnnl.ARG_SCALE: mem(pd.weights_desc(), sc), dnnl.ARG_SHIFT: mem(pd.weights_desc(), sh)}
    lead = dims[:-1]
    g = bool(flags & F.use_global_stats)
    gm, gv = np.full(lead, 0.2, np.float32), np.full(lead, 1.2, np.float32)
    a[dnnl.ARG_MEAN] = mem(pd.mean_desc(), gm if g else np.zeros(lead, np.float32))
    a[dnnl.ARG_VARIANCE] = mem(pd.variance_desc(), gv if g else np.zeros(lead, np.float32))
    dnnl.layer_normalization_forward(pd).execute(s, a)
    s.wait()
    y, m, v = R.layer_norm_forward(x, EPS, gm if g else None, gv if g else None, sc, sh)
    ok = close(a[dnnl.ARG_DST].to_numpy(), y)
    bpd = dnnl.layer_normalization_backward.primitive_desc(
        eng, PK.backward, md, md, md, EPS, flags, pd)
    b = {k: a[k] for k in (dnnl.ARG_SRC, dnnl.ARG_MEAN, dnnl.ARG_VARIANCE, dnnl.ARG_SCALE,
                           dnnl.ARG_SHIFT)}
    b[dnnl.ARG_DIFF_DST] = mem(md, dy)
    b[dnnl.ARG_DIFF_SRC] = mem(md)
    b[dnnl.ARG_DIFF_SCALE] = mem(bpd.diff_weights_desc())
    b[dnnl.ARG_DIFF_SHIFT] = mem(bpd.diff_weights_desc())
    dnnl.layer_normalization_backward(bpd).execute(s, b)
    s.wait()
    dx, dsc, dsh = R.layer_norm_backward(x, dy, a[dnnl.ARG_MEAN].to_numpy(),
                                         a[dnnl.ARG_VARIANCE].to_numpy(), EPS, sc, g)
    ok = ok and close(b[dnnl.ARG_DIFF_SRC].to_numpy(), dx)
    ok = ok and close(b[dnnl.ARG_DIFF_SCALE].to_numpy(), dsc)
    ok = ok and close(b[dnnl.ARG_DIFF_SHIFT].to_numpy(), dsh)
    results[name] = bool(ok)

lnorm("ln_rows", [3, 2, 37], "abc", both)
from pydnnl.runtime.heuristics import normalization as rules
# the bnorm elementwise pass walking whole runs in float8 vectors (the CPU path), forced,
# with the split statistics: runs of 21 (2 vectors and a tail), about 30 values (one run)
# or 50 (two runs, a short last work-item) per work-item, channel-uniform and channel runs
_bn_fused = rules.bn_fused
rules.bn_fused = lambda info, C, nbytes, run: (False, 0, False)
rules.bn_apply_vec = lambda info: 8
rules.BN_APPLY_VEC_VALUES = 50
bnorm("bn_vec_nchw", [3, 3, 3, 7], "abcd", both)
bnorm("bn_vec_nhwc", [3, 21, 1, 3], "acdb", both)
rules.BN_APPLY_VEC_VALUES = 30
bnorm("bn_vec_nchw_one_run", [3, 3, 3, 7], "abcd", both)
# the channels-innermost reduction per block of channels and chunk of rows (the CPU path),
# forced: blocks of 2 vectors of 8 (C = 21: a whole block, then scalar tail channels; C = 40:
# a last block with one whole vector), 3 chunks (the last one short), forward and backward
rules.bn_reduce_vec = lambda info, C, R: (8, 2, 3)
bnorm("bn_vec_reduce_nhwc", [3, 21, 1, 3], "acdb", both)
bnorm("bn_vec_reduce_nhwc_blocks", [2, 40, 2, 2], "acdb", both)
rules.bn_reduce_vec = lambda info, C, R: (0, 1, 0)
rules.bn_apply_vec = lambda info: 0
rules.bn_fused = _bn_fused
# the lnorm backward with one work-item per chunk of rows in float8 vectors (the CPU path),
# forced: rows of 37 (4 vectors and a tail), 4 rows per work-item over 10 rows (a short
# last one), given statistics, and the form summing diff_scale/diff_shift into its partial
# rows
_saved = (rules.ln_bwd_vec, rules.ln_row_cache, rules.ln_fwd_vec_rows, rules.ln_bwd_fused_ss,
          rules.ln_ss_params)
rules.ln_row_cache = lambda info, C, wg: 0
rules.ln_bwd_vec = lambda info, C, fused_ss: 8
rules.ln_fwd_vec_rows = lambda info, C: 4
lnorm("ln_vec_bwd", [5, 2, 37], "abc", both)
lnorm("ln_vec_bwd_global", [3, 11], "ab", both | F.use_global_stats)
rules.ln_bwd_fused_ss = lambda info, cache, wg=0: True
rules.ln_ss_params = lambda info, C, rows: (16, 3, True)
lnorm("ln_vec_bwd_fused_ss", [5, 2, 37], "abc", both)
(rules.ln_bwd_vec, rules.ln_row_cache, rules.ln_fwd_vec_rows, rules.ln_bwd_fused_ss,
 rules.ln_ss_params) = _saved
lnorm("ln_transposed_global", [4, 5], "ba", both | F.use_global_stats)
# the register-cached rows (the GPU path), forced
rules.ln_row_cache = lambda info, C, wg: -(-C // wg)
lnorm("ln_rows_cached", [3, 2, 37], "abc", both)
lnorm("ln_rows_cached_global", [3, 5], "ab", both | F.use_global_stats)
# ... also summing diff_scale/diff_shift in registers over chunks of 4 rows (the GPU's long
# rows), forced: 3 chunks, the last one short
rules.ln_bwd_fused_ss = lambda info, cache, wg=0: True
rules.ln_ss_rows = lambda info: 4
lnorm("ln_rows_cached_fused_ss", [5, 2, 37], "abc", both)
# the bnorm runs reduction summing its lanes in local memory (the GPU path), forced
rules.bn_reduce_tree = lambda info, lanes: lanes == "r"
bnorm("bn_nchw_relu_tree", [2, 3, 3, 5], "abcd", both | F.fuse_norm_relu)
# the one-kernel-per-channel bnorm (the CPU path), forced: 4 lanes over runs of 21 (an
# unrolled block, a plain step and a masked tail), local-memory and plain sums
rules.bn_fused = lambda info, C, nbytes, run: (True, 4, False)
bnorm("bn_fused_relu", [2, 3, 3, 7], "abcd", both | F.fuse_norm_relu)
bnorm("bn_fused_plain", [3, 2, 16], "abc", both)
# the fused kernel's run-time form at a second shape of the class (runs of 18: a masked tail)
bnorm("bn_fused_relu_shape2", [3, 3, 2, 9], "abcd", both | F.fuse_norm_relu)
# the lnorm backward row kernel summing diff_scale/diff_shift over chunks of rows (the CPU
# path), forced: 3 chunks of 4 rows (the last one short), the local-memory tree per row
rules.ln_row_cache = lambda info, C, wg: 0
rules.ln_bwd_fused_ss = lambda info, cache, wg=0: True
rules.ln_row_subgroup = lambda info, wg: False
rules.ln_ss_params = lambda info, C, rows: (16, 3, True)
lnorm("ln_rows_fused_ss", [5, 2, 37], "abc", both)
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind simulator is not installed")
def test_normalization_kernels_clean_under_oclgrind():
    # the optimizer pairs the index divisions and remainders behind LLVM's freeze, which
    # Oclgrind's uninitialized-value plugin cannot follow (as for the conv kernels)
    results = run_probe(PROBE, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results == {"bn_nchw_relu": True, "bn_nhwc": True, "bn_blocked_global": True,
                       "ln_rows": True, "ln_transposed_global": True,
                       "ln_rows_cached": True, "ln_rows_cached_global": True,
                       "ln_rows_cached_fused_ss": True,
                       "bn_nchw_relu_tree": True, "bn_fused_relu": True,
                       "bn_fused_plain": True, "ln_rows_fused_ss": True,
                       "bn_nhwc_shape2": True, "bn_fused_relu_shape2": True,
                       "bn_vec_nchw": True, "bn_vec_nhwc": True, "bn_vec_nchw_one_run": True,
                       "bn_vec_reduce_nhwc": True, "bn_vec_reduce_nhwc_blocks": True,
                       "ln_vec_bwd": True, "ln_vec_bwd_global": True,
                       "ln_vec_bwd_fused_ss": True}
