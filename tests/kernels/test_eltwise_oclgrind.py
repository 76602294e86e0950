"""Eltwise kernels (flat and strided, forward and backward, in-place) under the Oclgrind
simulator: no out-of-bounds access, no use of uninitialized values, no data race, no API
misuse, and results that match the numpy reference.

Oclgrind reports problems only on stderr, so the kernels run in a subprocess whose stderr is
read here; kernel caches are off so that every kernel is generated and built under Oclgrind.
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
from pydnnl.reference import eltwise as R

MD, F32, A = dnnl.memory.desc, dnnl.memory.data_type.f32, dnnl.algorithm
FWD = dnnl.prop_kind.forward_training
eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(5)
results = {}

def close(got, want):
    return bool(np.allclose(got, want, rtol=2e-5, atol=2e-6))

def fwd(alg, alpha, beta, x, st, dt_, inplace=False):
    pd = dnnl.eltwise_forward.primitive_desc(eng, FWD, alg, MD(x.shape, F32, st),
                                             MD(x.shape, F32, dt_), alpha, beta)
    src = dnnl.memory(pd.src_desc(), eng, x)
    dst = src if inplace else dnnl.memory(pd.dst_desc(), eng)
    dnnl.eltwise_forward(pd).execute(s, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    s.wait()
    return pd.impl_info_str(), dst.to_numpy()

def bwd(alg, alpha, beta, v, dd, data_tag, diff_tag, inplace=False):
    data_md, diff_md = MD(v.shape, F32, data_tag), MD(v.shape, F32, diff_tag)
    pd = dnnl.eltwise_backward.primitive_desc(eng, alg, diff_md, diff_md, data_md, alpha, beta)
    arg = dnnl.ARG_DST if "use_dst" in alg.name else dnnl.ARG_SRC
    data = dnnl.memory(data_md, eng, v)
    ddm = dnnl.memory(diff_md, eng, dd)
    dsm = ddm if inplace else dnnl.memory(diff_md, eng)
    dnnl.eltwise_backward(pd).execute(s, {arg: data, dnnl.ARG_DIFF_DST: ddm,
                                          dnnl.ARG_DIFF_SRC: dsm})
    s.wait()
    return pd.impl_info_str(), dsm.to_numpy()

# 546 elements: more than one work-group, not a multiple of one
x = rng.uniform(-3, 3, (2, 3, 7, 13)).astype(np.float32)
dd = rng.standard_normal(x.shape).astype(np.float32)

impl, y = fwd(A.eltwise_gelu_erf, 0.0, 0.0, x, "abcd", "abcd")
results["flat_fwd"] = impl.endswith("flat") and close(y, R.eltwise_forward(A.eltwise_gelu_erf, x))

impl, g = bwd(A.eltwise_swish, 0.5, 0.0, x, dd, "acdb", "acdb")
results["flat_bwd"] = impl.endswith("flat") and close(
    g, R.eltwise_backward(A.eltwise_swish, dd, x, 0.5))

impl, y = fwd(A.eltwise_clip, -0.5, 1.0, x, "abcd", "nChw16c")
results["strided_fwd"] = impl.endswith("strided") and close(
    y, R.eltwise_forward(A.eltwise_clip, x, -0.5, 1.0))

d = R.eltwise_forward(A.eltwise_elu, x, 1.0).astype(np.float32)
impl, g = bwd(A.eltwise_elu_use_dst_for_bwd, 1.0, 0.0, d, dd, "abcd", "acdb")
results["strided_bwd_use_dst"] = impl.endswith("strided") and close(
    g, R.eltwise_backward(A.eltwise_elu_use_dst_for_bwd, dd, d, 1.0))

impl, y = fwd(A.eltwise_logistic, 0.0, 0.0, x, "abcd", "abcd", inplace=True)
results["in_place_fwd"] = close(y, R.eltwise_forward(A.eltwise_logistic, x))

impl, g = bwd(A.eltwise_hardswish, 1 / 6, 0.5, x, dd, "nChw8c", "nChw8c", inplace=True)
results["in_place_bwd_blocked"] = impl.endswith("strided") and close(
    g, R.eltwise_backward(A.eltwise_hardswish, dd, x, 1 / 6, 0.5))

# bf16 src, f16 dst (ushort buffers both ways), flat and strided; f16 backward
BF16, F16 = dnnl.memory.data_type.bf16, dnnl.memory.data_type.f16
for name, st, dt_ in (("bf16_f16_flat", "abcd", "abcd"), ("bf16_f16_strided", "acdb", "abcd")):
    pd = dnnl.eltwise_forward.primitive_desc(eng, FWD, A.eltwise_tanh, MD(x.shape, BF16, st),
                                             MD(x.shape, F16, dt_))
    src = dnnl.memory(pd.src_desc(), eng, x)
    dst = dnnl.memory(pd.dst_desc(), eng)
    dnnl.eltwise_forward(pd).execute(s, {dnnl.ARG_SRC: src, dnnl.ARG_DST: dst})
    s.wait()
    want = R.eltwise_forward(A.eltwise_tanh, src.to_numpy().astype(np.float64))
    results[name] = bool(np.allclose(dst.to_numpy(), want, rtol=2 ** -10, atol=2e-6))
md16 = MD(x.shape, F16, "abcd")
pd = dnnl.eltwise_backward.primitive_desc(eng, A.eltwise_relu, md16, md16, md16, 0.1)
data, ddm = dnnl.memory(md16, eng, x), dnnl.memory(md16, eng, dd)
dsm = dnnl.memory(md16, eng)
dnnl.eltwise_backward(pd).execute(s, {dnnl.ARG_SRC: data, dnnl.ARG_DIFF_DST: ddm,
                                      dnnl.ARG_DIFF_SRC: dsm})
s.wait()
results["f16_bwd"] = bool(np.allclose(dsm.to_numpy(), R.eltwise_backward(
    A.eltwise_relu, ddm.to_numpy().astype(np.float64), data.to_numpy().astype(np.float64), 0.1),
    rtol=2 ** -10, atol=1e-6))
# run-time element count (kernels.eltwise.flat_runtime): a second shape of the class, 23
# elements (a partial, lone work-group); the GPU shape (3 elements per work-item, wg apart)
for name, iters in (("rt_flat_second_shape", 1), ("rt_flat_items3", 3)):
    from pydnnl.runtime.heuristics import eltwise as HE
    HE.flat_params = lambda info, count, iters=iters: (256, iters)
    ok = True
    for shape in ((1, 1, 1, 23), (3, 5, 7, 11)):
        v = rng.uniform(-3, 3, shape).astype(np.float32)
        g = rng.standard_normal(shape).astype(np.float32)
        impl, y = fwd(A.eltwise_elu, 0.5, 0.0, v, "abcd", "abcd")
        ok = ok and impl.endswith("flat") and close(y, R.eltwise_forward(A.eltwise_elu, v, 0.5))
        impl, gg = bwd(A.eltwise_elu, 0.5, 0.0, v, g, "abcd", "abcd")
        ok = ok and close(gg, R.eltwise_backward(A.eltwise_elu, g, v, 0.5))
    results[name] = ok
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="Oclgrind OpenCL platform not installed")
def test_eltwise_kernels_under_oclgrind():
    results = run_probe(PROBE)
    assert results and all(results.values()), results
