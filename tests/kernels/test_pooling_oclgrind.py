"""Pooling kernels under the Oclgrind simulator: every kernel of the family (forward with and
without a workspace, u8 and s32 workspaces, backward of each algorithm) on tiny shapes in
plain, channels-last and blocked (padded channels) layouts, bf16 storage, global pooling
(run as a reduction), and the CPU's interior + edge kernels of a strided width: no
out-of-bounds access, no use of uninitialized values, no data race, no API misuse, and results
equal to the numpy reference.
Kernels are built unoptimized under Oclgrind (see the test).
"""
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
from pydnnl.primitives.pooling import pooling_output_size
from pydnnl.reference.pooling import pooling_backward as ref_bwd
from pydnnl.reference.pooling import pooling_forward as ref_fwd

MD, F32 = dnnl.memory.desc, dnnl.memory.data_type.f32
eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(5)
ALG = {"max": dnnl.algorithm.pooling_max,
       "avg_include_padding": dnnl.algorithm.pooling_avg_include_padding,
       "avg_exclude_padding": dnnl.algorithm.pooling_avg_exclude_padding}
results = {}
impls = {}

def close(got, ref, tol=1e-5):
    return bool(np.abs(got - ref).max() <= tol * max(1.0, np.abs(ref).max()))

def case(key, dims, tag, alg, k, st, d, pl, pr, prop=dnnl.prop_kind.forward_training, typ=F32):
    n = int(np.prod(dims))
    x = (rng.permutation(n) * 0.25 - n / 8).reshape(dims).astype(np.float32)
    out = list(dims[:2]) + [pooling_output_size(i, *a) for i, a in
                            zip(dims[2:], zip(k, st, d, pl, pr))]
    sm, dm = MD(dims, typ, tag), MD(out, typ, tag)
    fpd = dnnl.pooling_forward.primitive_desc(eng, prop, ALG[alg], sm, dm, st, k, d, pl, pr)
    src, dst = dnnl.memory(sm, eng, x), dnnl.memory(dm, eng)
    x = src.to_numpy().astype(np.float32)  # as stored
    args = {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst}
    ws = None
    if not fpd.workspace_desc().is_zero():
        ws = args[dnnl.ARG_WORKSPACE] = dnnl.memory(fpd.workspace_desc(), eng)
    impls[key] = fpd.impl_info_str()
    dnnl.pooling_forward(fpd).execute(s, args)
    s.wait()
    want, want_ws = ref_fwd(x, alg, k, st, d, pl, pr)
    tol = 1e-5 if typ == F32 else 2.0 ** -8  # one bf16 rounding of f32 arithmetic
    ok = close(dst.to_numpy().astype(np.float32), want, tol)
    if ws is not None:
        ok = ok and bool(np.array_equal(ws.to_numpy(), want_ws))
    if prop == dnnl.prop_kind.forward_training:
        g = rng.standard_normal(out).astype(np.float32)
        bpd = dnnl.pooling_backward.primitive_desc(eng, ALG[alg], sm, dm, st, k, d, pl, pr, fpd)
        # diff_dst written by the host (see the reorder probe on Oclgrind's shadow state)
        gm, dsm = dnnl.memory(dm, eng, g), dnnl.memory(sm, eng)
        g = gm.to_numpy().astype(np.float32)
        bargs = {dnnl.ARG_DIFF_DST: gm, dnnl.ARG_DIFF_SRC: dsm}
        if ws is not None:
            host_ws = dnnl.memory(fpd.workspace_desc(), eng, ws.to_numpy())
            bargs[dnnl.ARG_WORKSPACE] = host_ws
        dnnl.pooling_backward(bpd).execute(s, bargs)
        s.wait()
        ok = ok and close(dsm.to_numpy().astype(np.float32),
                          ref_bwd(g, dims, alg, k, st, d, pl, pr, want_ws), tol)
    results[key] = ok

case("max_2d_nchw", [1, 2, 5, 6], "abcd", "max", [3, 3], [2, 2], [0, 0], [1, 1], [1, 1])
case("max_2d_inference", [1, 2, 5, 6], "acdb", "max", [3, 2], [2, 1], [0, 1], [1, 0], [0, 1],
     dnnl.prop_kind.forward_inference)
case("avg_p_1d_nwc", [2, 3, 9], "acb", "avg_include_padding", [3], [2], [1], [2], [0])
case("avg_np_2d_blocked", [1, 3, 4, 5], "aBcd8b", "avg_exclude_padding", [2, 3], [1, 2],
     [0, 0], [1, 1], [0, 1])
case("max_3d_s32_ws", [1, 1, 3, 9, 9], "abcde", "max", [2, 8, 8], [1, 1, 1], [0, 0, 0],
     [0, 1, 0], [0, 0, 1])
case("avg_p_2d_nchw_bf16", [1, 2, 7, 9], "abcd", "avg_include_padding", [3, 3], [2, 2],
     [0, 0], [1, 1], [1, 1], typ=dnnl.memory.data_type.bf16)
# global pooling: a reduction over the spatial dims (inference max, averages)
case("global_avg_nchw", [2, 3, 5, 5], "abcd", "avg_exclude_padding", [5, 5], [1, 1], [0, 0],
     [0, 0], [0, 0], dnnl.prop_kind.forward_inference)
case("global_max_nhwc", [2, 5, 3, 4], "acdb", "max", [3, 4], [1, 1], [0, 0], [0, 0], [0, 0],
     dnnl.prop_kind.forward_inference)
# the CPU's split of a strided width into interior lanes (vector loads forward, no bounds
# checks backward) and edge lanes, forced on here (the simulator counts as a GPU)
import pydnnl.primitives.pooling as PP
PP.split_interior = lambda info: True
case("interior_max_2d", [1, 2, 3, 38], "abcd", "max", [3, 3], [2, 2], [0, 0], [1, 1], [1, 1])
case("interior_avg_np_1d_dil", [2, 1, 70], "abc", "avg_exclude_padding", [3], [3], [1], [2],
     [1])
case("interior_avg_p_bf16", [1, 1, 2, 36], "abcd", "avg_include_padding", [2, 3], [1, 2],
     [0, 0], [0, 1], [1, 1], typ=dnnl.memory.data_type.bf16)
results["interior_impls"] = all("interior+edges" in impls[k] for k in (
    "interior_max_2d", "interior_avg_np_1d_dil", "interior_avg_p_bf16"))
results["global_impls"] = all("reduction" in impls[k] for k in ("global_avg_nchw",
                                                                "global_max_nhwc"))
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="the Oclgrind simulator is not installed")
def test_pooling_kernels_clean_under_oclgrind():
    # unoptimized builds: Oclgrind 21.10's uninitialized-value plugin aborts on the ``freeze``
    # instructions LLVM's optimizer emits when it pairs the flat index's divisions and
    # remainders (see test_conv_kernels_oclgrind.py)
    results = run_probe(PROBE, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results == {"max_2d_nchw": True, "max_2d_inference": True, "avg_p_1d_nwc": True,
                       "avg_np_2d_blocked": True, "max_3d_s32_ws": True,
                       "avg_p_2d_nchw_bf16": True, "global_avg_nchw": True,
                       "global_max_nhwc": True, "interior_max_2d": True,
                       "interior_avg_np_1d_dil": True, "interior_avg_p_bf16": True,
                       "interior_impls": True, "global_impls": True}
