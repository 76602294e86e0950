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


# A gathered from channels-last images (an implicit-GEMM convolution: stride 2, padding, a
# ragged last row block) and C's rows scattered over a strided grid (one phase of a strided
# backward data); C's other rows must keep their values
GATHER_PROBE = "SEED = 6\n" + GEMM_NV_PROBE_PRELUDE + r"""
ih, iw, c, kh, kw, oh, ow = 5, 6, 16, 3, 3, 3, 3
geom = (ih, iw, c, kh, kw, oh, ow, 2, 2, 1, 1, 1, 1)
n_img, oc = 2, 20
x = rng.uniform(-1, 1, (n_img, ih, iw, c)).astype(np.float32)
w = rng.uniform(-1, 1, (kh * kw * c, oc)).astype(np.float32)
patches = np.zeros((n_img, oh, ow, kh, kw, c))
for y in range(oh):
    for xx in range(ow):
        for ky in range(kh):
            for kx in range(kw):
                iy, ix = 2 * y - 1 + ky, 2 * xx - 1 + kx
                if 0 <= iy < ih and 0 <= ix < iw:
                    patches[:, y, xx, ky, kx] = x[:, iy, ix]
want = patches.reshape(n_img * oh * ow, -1) @ w.astype(np.float64)
tile = NvTile(32, 32, 16, 4, 4)
for name, rows in (("gather", None), ("scatter", (oh, ow, 7 * 8, 2 * 8, 2))):
    m = n_img * oh * ow
    pr = GemmProblem(m=m, n=oc, k=kh * kw * c, ldb=oc, ldc=oc, a_conv=geom, c_rows=rows)
    cm = np.full(pr.size("c"), 3.0, np.float32)
    X, W, C = buf(x), buf(w), buf(cm)
    Kernel(eng.context, eng.device, build_gemm_nv(pr, tile))(s, X.buffer, W.buffer, C.buffer)
    s.wait()
    got = C.to_numpy()
    if rows is None:
        out = got.reshape(m, oc)
    else:
        at = [t * 56 + a * 16 + b * 2 for t in range(n_img) for a in range(oh) for b in range(ow)]
        mat = got.reshape(-1, oc)
        out = mat[at].copy()
        mat[at] = 3.0
        results[name + "_rest"] = bool((got == 3.0).all())
    results[name] = bool(np.allclose(out, want, rtol=1e-4, atol=1e-4))
print(json.dumps(results))
"""


@pytest.mark.skipif(not has_oclgrind(), reason="Oclgrind OpenCL platform not installed")
def test_gathering_gemm_nv_under_oclgrind():
    results = run_probe(GATHER_PROBE, OCLGRIND_BUILD_OPTIONS="-cl-opt-disable")
    assert results == {"gather": True, "scatter": True, "scatter_rest": True}
