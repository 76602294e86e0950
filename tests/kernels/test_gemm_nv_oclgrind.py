"""The hand-written NVIDIA SGEMM's SIMT kernel (pydnnl.kernels.gemm_nv: plain OpenCL C) under
the Oclgrind simulator: no out-of-bounds access, no data race in its double-buffered shared
tiles or in the k-groups' sum, no uninitialized read, and C equal to numpy's product. Ragged
edges (clamped loads, guarded stores), one k-group and two and four k-groups, and a partial
last k slice (its loads past k neither read nor counted)."""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from oclgrind_helpers import GEMM_NV_PROBE_PRELUDE, has_oclgrind, run_probe  # noqa: E402

PROBE = "SEED = 5\n" + GEMM_NV_PROBE_PRELUDE + r"""
for name, tile, (m, n, k) in (("plain", NvTile(32, 64, 16, 4, 4), (37, 68, 32)),
                              ("k2", NvTile(16, 64, 16, 4, 4, ksplit=2), (20, 64, 64)),
                              ("k4", NvTile(16, 32, 16, 4, 4, ksplit=4), (21, 36, 64)),
                              ("tail", NvTile(32, 64, 16, 4, 4), (37, 68, 21))):
    pr = GemmProblem(m=m, n=n, k=k, lda=k, ldb=n, ldc=n, beta=0.5)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    c = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    A, B, C = buf(a), buf(b), buf(c)
    src = build_gemm_nv(pr, tile)
    Kernel(eng.context, eng.device, src)(s, A.buffer, B.buffer, C.buffer)
    s.wait()
    want = a.astype(np.float64) @ b + 0.5 * c
    results[name] = bool(np.allclose(C.to_numpy().reshape(m, n), want, rtol=1e-4, atol=1e-4))
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="Oclgrind OpenCL platform not installed")
def test_gemm_nv_under_oclgrind():
    # built unoptimized: Oclgrind's uninitialized-value plugin aborts on the optimizer's freeze
    results = run_probe(PROBE, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results == {"plain": True, "k2": True, "k4": True, "tail": True}
