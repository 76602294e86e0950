"""Optimizer-update kernels (sgd with Nesterov momentum and weight decay, adam; flat and
strided, padded blocked layouts) under the Oclgrind simulator: no out-of-bounds access, no use
of uninitialized values, no data race, no API misuse, and results that match the numpy
reference.

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
from pydnnl.reference import optimizer as R

MD, F32 = dnnl.memory.desc, dnnl.memory.data_type.f32
eng = dnnl.engine.from_name("Oclgrind")
assert eng.is_simulator
s = dnnl.stream(eng)
rng = np.random.default_rng(3)
results = {}
DIMS = [5, 67]  # 335 elements: more than one work-group, not a multiple of one

def close(got, want):
    return bool(np.allclose(got, want, rtol=1e-5, atol=1e-6))

def run(cls, pd, p0, grads):
    mem = lambda d, a: dnnl.memory(d, eng, a)
    p = mem(pd.src_desc(), p0)
    g = dnnl.memory(pd.diff_src_desc(), eng)
    args = {dnnl.ARG_SRC: p, dnnl.ARG_DIFF_SRC: g}
    states = []
    for i, arg in enumerate((dnnl.ARG_OPTIMIZER_STATE_0, dnnl.ARG_OPTIMIZER_STATE_1)):
        if not pd.state_desc(i).is_zero():
            states.append(mem(pd.state_desc(i), np.zeros(DIMS, np.float32)))
            args[arg] = states[-1]
    t = None
    if cls is dnnl.adam_update:
        t = args[dnnl.ARG_OPTIMIZER_STEP] = mem(pd.step_desc(), np.zeros(1, np.float32))
    prim = cls(pd)
    for k, grad in enumerate(grads, 1):
        g.write(grad)
        if t is not None:
            t.write(np.array([k], np.float32))
        prim.execute(s, args)
        s.wait()
    return pd.impl_info_str(), p.to_numpy(), [m.to_numpy() for m in states]

p0 = rng.standard_normal(DIMS).astype(np.float32)
grads = [rng.standard_normal(DIMS).astype(np.float32) for _ in range(2)]

for name, ptag, gtag in (("flat", "ab", "ab"), ("strided", "Ab16a", "ba")):
    pd = dnnl.sgd_update.primitive_desc(eng, MD(DIMS, F32, ptag), 0.1, 0.9, 0.01, True,
                                        diff_src_desc=MD(DIMS, F32, gtag))
    impl, p, (vel,) = run(dnnl.sgd_update, pd, p0, grads)
    want, wv = p0, np.zeros(DIMS)
    for g in grads:
        want, wv = R.sgd_update(want, g, 0.1, 0.9, 0.01, True, wv)
    results["sgd_" + name] = impl.endswith(name) and close(p, want) and close(vel, wv)

    pd = dnnl.adam_update.primitive_desc(eng, MD(DIMS, F32, ptag), 0.01, 0.9, 0.999, 1e-8, 0.1,
                                         diff_src_desc=MD(DIMS, F32, gtag))
    impl, p, (m, v) = run(dnnl.adam_update, pd, p0, grads)
    want, wm, wv = p0, 0.0, 0.0
    for t, g in enumerate(grads, 1):
        want, wm, wv = R.adam_update(want, g, wm, wv, t, 0.01, 0.9, 0.999, 1e-8, 0.1)
    results["adam_" + name] = impl.endswith(name) and close(p, want) and close(m, wm) \
        and close(v, wv)

pd = dnnl.sgd_update.primitive_desc(eng, MD(DIMS, F32, "ba"), 0.5)  # no state
impl, p, _ = run(dnnl.sgd_update, pd, p0, grads[:1])
results["sgd_plain"] = close(p, p0 - 0.5 * grads[0].astype(np.float64))
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="Oclgrind OpenCL platform not installed")
def test_optimizer_kernels_under_oclgrind():
    results = run_probe(PROBE)
    assert results and all(results.values()), results
