"""Softmax kernels (row and strided, forward and backward, accurate and log, in-place) under
the Oclgrind simulator: no out-of-bounds access, no use of uninitialized values, no data race,
no API misuse, and results that match the numpy reference.

The kernels are built with ``-cl-opt-disable`` (``OCLGRIND_BUILD_OPTIONS``): Oclgrind's
uninitialized-value plugin aborts on LLVM's ``freeze`` instruction, which the optimizer emits
for the divisions and remainders that split a flat row or output index into dims."""
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
from pydnnl.reference import softmax as R

MD, F32, A = dnnl.memory.desc, dnnl.memory.data_type.f32, dnnl.algorithm
eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(3)
results = {}

def close(got, want):
    return bool(np.allclose(got, want, rtol=2e-5, atol=2e-6))

def case(name, alg, dims, axis, tag, variant, inplace=False):
    x = rng.uniform(-4, 4, dims).astype(np.float32)
    md = MD(dims, F32, tag)
    fpd = dnnl.softmax_forward.primitive_desc(eng, dnnl.prop_kind.forward_training, alg, md,
                                              md, axis)
    src = dnnl.memory(md, eng, x)
    dst = src if inplace else dnnl.memory(md, eng)
    dnnl.softmax_forward(fpd).execute(s, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    s.wait()
    y = dst.to_numpy()
    ok = fpd.impl_info_str().endswith(variant) and close(y, R.softmax_forward(alg, x, axis))
    dd = rng.uniform(-1, 1, dims).astype(np.float32)
    bpd = dnnl.softmax_backward.primitive_desc(eng, alg, md, md, md, axis, fpd)
    ddm = dnnl.memory(md, eng, dd)
    dsm = ddm if inplace else dnnl.memory(md, eng)
    dnnl.softmax_backward(bpd).execute(s, {dnnl.ARG_DST: dst, dnnl.ARG_DIFF_DST: ddm,
                                           dnnl.ARG_DIFF_SRC: dsm})
    s.wait()
    ok = ok and bpd.impl_info_str().endswith(variant)
    results[name] = ok and close(dsm.to_numpy(), R.softmax_backward(alg, dd, y, axis))
    return fpd

# the simulator is a GPU: forward rows kept in registers (70 values over 32 work-items)
results["row_in_registers"] = case("row_accurate", A.softmax_accurate, (3, 70), 1, "ab",
                                   "row")._problem.cache == 3
case("row_log_in_place", A.softmax_log, (2, 40), 1, "ab", "row", inplace=True)
case("strided_accurate_nhwc", A.softmax_accurate, (2, 5, 3, 4), 1, "abcd", "strided")
case("strided_log_blocked", A.softmax_log, (2, 20, 2, 3), 3, "nChw16c", "strided")
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="Oclgrind OpenCL platform not installed")
def test_softmax_kernels_under_oclgrind():
    results = run_probe(PROBE, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results and all(results.values()), results
