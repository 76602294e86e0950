"""Reduction kernels (row with one or several rows per work-group, the CPU's vector-load
``vrow`` with and without chunks, strided, and the chunked partial + final pair) under the
Oclgrind simulator: no out-of-bounds access, no use of uninitialized values, no data race, no API
misuse, and results that match the numpy reference."""
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
from pydnnl.reference.reduction import reduction as R

MD, F32, A = dnnl.memory.desc, dnnl.memory.data_type.f32, dnnl.algorithm
eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(4)
results = {}

def case(name, alg, sdims, ddims, tag, variant, p=1.0, eps=0.0):
    lo = 0.9 if alg == A.reduction_mul else -2.0
    x = rng.uniform(lo, 2.0 if lo < 0 else 1.1, sdims).astype(np.float32)
    pd = dnnl.reduction.primitive_desc(eng, alg, MD(sdims, F32, tag), MD(ddims, F32, "any"),
                                       p, eps)
    src = dnnl.memory(pd.src_desc(), eng, x)
    dst = dnnl.memory(pd.dst_desc(), eng)
    dnnl.reduction(pd).execute(s, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    s.wait()
    want = R(alg, x, ddims, p, eps)
    results[name] = (variant in pd.impl_info_str()
                     and bool(np.allclose(dst.to_numpy(), want, rtol=3e-5, atol=1e-6)))

case("row_sum", A.reduction_sum, (3, 4, 8, 8), (3, 4, 1, 1), "abcd", "row")
case("row_norm_blocked", A.reduction_norm_lp_max, (2, 40, 2, 2), (2, 1, 2, 2), "nChw16c",
     "row", 2.0, 0.5)
case("strided_max", A.reduction_max, (5, 3, 7), (1, 3, 7), "abc", "strided")
case("rows_mean_nhwc", A.reduction_mean, (2, 3, 4, 5), (2, 1, 1, 5), "acdb", "row")
case("split_mul", A.reduction_mul, (9000,), (1,), "a", "split")
case("rows_tail_mean", A.reduction_mean, (70, 49), (70, 1), "ab", "row")

# the CPU's shapes (a work-item per output, vector loads, a scalar tail), planned for a
# CPU's traits and run here
from dataclasses import replace
from pydnnl.primitives.reduction import plan_stages, stages_plan

cpu = replace(eng.info, type="cpu", compute_units=2, max_work_group_size=8192)

def cpu_case(name, alg, sdims, ddims, tag, variant, p=1.0, typ=F32):
    x = rng.uniform(-2.0, 2.0, sdims).astype(np.float32)
    md, dmd = MD(sdims, typ, tag), MD(ddims, typ, tag)
    stages, scratch, impl = plan_stages(cpu, alg.name[10:], p, 0.0, md, dmd)
    plan = stages_plan(eng, "reduction", stages, scratch)
    src, dst = dnnl.memory(md, eng, x), dnnl.memory(dmd, eng)
    x = src.to_numpy().astype(np.float32)
    plan.execute(s, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    s.wait()
    want = R(alg, x, ddims, p, 0.0)
    tol = 3e-5 if typ == F32 else 2.0 ** -8
    results[name] = (impl.startswith("ocl:reduction:" + variant)
                     and bool(np.allclose(dst.to_numpy().astype(np.float32), want, rtol=tol,
                                          atol=1e-5)))

cpu_case("vrow_mean", A.reduction_mean, (6, 2, 19), (6, 2, 1), "abc", "vrow")
cpu_case("vrow_runs_norm", A.reduction_norm_lp_sum, (3, 2, 4100), (1, 2, 1), "abc",
         "vrow:split", 2.5)
cpu_case("vrow_split_max", A.reduction_max, (12300,), (1,), "a", "vrow:split")
cpu_case("vrow_bf16_sum", A.reduction_sum, (4, 37), (4, 1), "ab", "vrow",
         typ=dnnl.memory.data_type.bf16)
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="Oclgrind OpenCL platform not installed")
def test_reduction_kernels_under_oclgrind():
    results = run_probe(PROBE, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results and all(results.values()), results
