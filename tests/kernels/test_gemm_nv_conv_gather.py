"""The hand-written NVIDIA GEMM with A gathered from channels-last images (``GemmProblem.
a_conv``: an implicit-GEMM convolution, no patch matrix). The SIMT kernel is plain OpenCL C,
so the gather runs on every device here against numpy's float64 patches; the tensor-core
kernels on NVIDIA GPUs."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels.gemm import GemmProblem
from pydnnl.kernels.gemm_nv import NvTile, build_gemm_nv, supports
from pydnnl.runtime.kernel import Kernel

F32 = dnnl.memory.data_type.f32

# (n, ih, iw, c, kh, kw, sh, sw, ph, pw, dh, dw, oc)
GEOMS = [
    (2, 7, 7, 16, 3, 3, 1, 1, 1, 1, 1, 1, 24),    # a 3x3 layer, rows past m in the last block
    (1, 9, 8, 32, 3, 3, 2, 2, 1, 0, 2, 1, 40),    # stride 2, dilation, one-sided padding
    (3, 5, 6, 16, 1, 1, 1, 1, 0, 0, 1, 1, 64),    # 1x1
]
SIMT = NvTile(32, 32, 16, 4, 4)
TC = NvTile(64, 64, 16, 8, 8, mma="tf32", wm=32, wn=32)


def _problem(geom, **kw):
    n, ih, iw, c, kh, kw_, sh, sw, ph, pw, dh, dw, oc = geom
    oh = (ih + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (iw + 2 * pw - dw * (kw_ - 1) - 1) // sw + 1
    return GemmProblem(m=n * oh * ow, n=oc, k=kh * kw_ * c, ldb=oc, ldc=oc,
                       a_conv=(ih, iw, c, kh, kw_, oh, ow, sh, sw, ph, pw, dh, dw),
                       runtime_offsets=True, **kw)


def _patches(x, pr):
    """The patch matrix the kernel gathers, in float64: [n * oh * ow, kh * kw * c]."""
    ih, iw, c, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw = pr.a_conv
    n = x.shape[0]
    out = np.zeros((n, oh, ow, kh, kw, c))
    for y in range(oh):
        for xx in range(ow):
            for ky in range(kh):
                for kx in range(kw):
                    iy, ix = y * sh - ph + ky * dh, xx * sw - pw + kx * dw
                    if 0 <= iy < ih and 0 <= ix < iw:
                        out[:, y, xx, ky, kx] = x[:, iy, ix]
    return out.reshape(n * oh * ow, kh * kw * c)


def _run(engine, stream, pr, tile, x, w, x_off=4):
    src = build_gemm_nv(pr, tile)
    kern = Kernel(engine.context, engine.device, src)

    def mem(v):
        return dnnl.memory(dnnl.memory.desc([v.size], F32, "a"), engine, v.ravel().copy())

    xa = np.concatenate([np.full(x_off, np.nan, np.float32), x.ravel()])
    c = np.full(max(pr.batch * pr.m * pr.ldc, pr.size("c")) + 5, 7.0, np.float32)
    mx, mw, mc = mem(xa), mem(w), mem(c)
    vals = {"a": mx.buffer, "b": mw.buffer, "c": mc.buffer, "a_off": np.int64(x_off),
            "b_off": np.int64(0), "c_off": np.int64(0), "m": np.int64(pr.m)}
    kern(stream, *[vals[a] for a in src.arg_names])
    stream.wait()
    return mc.to_numpy()


@pytest.mark.parametrize("gi", range(len(GEOMS)))
def test_gathered_a_matches_the_patches(engine, stream, gi):
    pr = _problem(GEOMS[gi], runtime_m="any")
    assert supports(pr, SIMT)
    rng = np.random.default_rng(gi)
    n, ih, iw, c = GEOMS[gi][:4]
    x = rng.standard_normal((n, ih, iw, c)).astype(np.float32)
    w = rng.standard_normal((pr.k, pr.n)).astype(np.float32)
    got = _run(engine, stream, pr, SIMT, x, w)
    want = _patches(x.astype(np.float64), pr) @ w.astype(np.float64)
    np.testing.assert_allclose(got[:pr.m * pr.n].reshape(pr.m, pr.n), want, rtol=1e-4,
                               atol=1e-4)
    assert (got[pr.m * pr.n:] == 7.0).all()  # nothing past C


def test_gather_supports_whole_slices_only():
    pr = _problem(GEOMS[0])
    assert supports(pr, SIMT) and supports(pr, TC)
    odd = _problem((1, 5, 5, 24, 3, 3, 1, 1, 1, 1, 1, 1, 32))  # 24 channels: a slice spans taps
    assert not supports(odd, SIMT)
    assert not supports(pr, NvTile(32, 32, 16, 4, 4, kslices=3))
    with pytest.raises(ValueError, match="a_conv"):
        GemmProblem(m=8, n=8, k=10, a_conv=(4, 4, 16, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1))


@pytest.mark.parametrize("gi", range(len(GEOMS)))
def test_tensor_cores_gather(engine, stream, gi):
    if not (engine.info.is_gpu and engine.info.vendor_family == "nvidia"):
        pytest.skip("tensor-core kernels run on NVIDIA GPUs only (inline PTX mma.sync)")
    pr = _problem(GEOMS[gi], runtime_m="any")
    rng = np.random.default_rng(10 + gi)
    n, ih, iw, c = GEOMS[gi][:4]
    x = rng.standard_normal((n, ih, iw, c)).astype(np.float32)
    w = rng.standard_normal((pr.k, pr.n)).astype(np.float32)
    got = _run(engine, stream, pr, TC, x, w)[:pr.m * pr.n].reshape(pr.m, pr.n)
    want = _patches(x.astype(np.float64), pr) @ w.astype(np.float64)
    err = np.abs(got - want).max() / np.abs(want).max()
    assert 1e-5 < err < 2e-3, err  # TF32's inputs, not f32's


ASYNC = NvTile(128, 64, 16, 8, 8, mma="tf32", wm=64, wn=32, stages=3)


def test_async_gather_source():
    """cp.async gathers a float4 outside the image as a copy of no bytes (zeros)."""
    src = build_gemm_nv(_problem(GEOMS[1], runtime_m="any"), ASYNC).source
    assert "pd_cp16z(" in src and "in ? 16u : 0u" in src and "ra[" not in src


@pytest.mark.parametrize("x_off", [4, 1], ids=["aligned", "offset1"])
@pytest.mark.parametrize("gi", range(len(GEOMS)))
def test_async_gather_gives_the_register_staged_bits(engine, stream, gi, x_off):
    """The cp.async gather (zero-filled copies at the image's edges; element-wise copies of
    a misaligned source) computes the register-staged gather's bits, both against float64."""
    if not (engine.info.is_gpu and engine.info.vendor_family == "nvidia"):
        pytest.skip("tensor-core kernels run on NVIDIA GPUs only (inline PTX mma.sync)")
    pr = _problem(GEOMS[gi], runtime_m="any")
    assert supports(pr, ASYNC)
    rng = np.random.default_rng(20 + gi)
    n, ih, iw, c = GEOMS[gi][:4]
    x = rng.standard_normal((n, ih, iw, c)).astype(np.float32)
    w = rng.standard_normal((pr.k, pr.n)).astype(np.float32)
    got = _run(engine, stream, pr, ASYNC, x, w, x_off)
    staged = _run(engine, stream, pr, NvTile(128, 64, 16, 8, 8, mma="tf32", wm=64, wn=32),
                  x, w, x_off)
    want = _patches(x.astype(np.float64), pr) @ w.astype(np.float64)
    err = np.abs(got[:pr.m * pr.n].reshape(pr.m, pr.n) - want).max() / np.abs(want).max()
    assert 1e-5 < err < 2e-3, err
    assert np.array_equal(got, staged) and (got[pr.m * pr.n:] == 7.0).all()


# {{{ transposed: a weight gradient's patches^T @ diff_dst

# (n, ih, iw, c, kh, kw, sh, sw, ph, pw, dh, dw, oc): point counts multiples of 16
GEOMS_T = [
    (2, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 24),    # 3x3, 144 rows: a ragged last block
    (8, 9, 8, 32, 3, 3, 2, 2, 1, 0, 2, 1, 40),    # stride 2, dilation, one-sided padding
    (2, 8, 8, 16, 1, 1, 2, 2, 0, 0, 1, 1, 64),    # 1x1 stride 2, 16 rows
]


def _problem_t(geom, batch=1, **kw):
    n, ih, iw, c, kh, kw_, sh, sw, ph, pw, dh, dw, oc = geom
    oh = (ih + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (iw + 2 * pw - dw * (kw_ - 1) - 1) // sw + 1
    m, points = kh * kw_ * c, n * oh * ow
    ks = points // batch
    strides = dict(batch=batch, stride_a=ks * m, stride_b=ks * oc, stride_c=m * oc) \
        if batch > 1 else {}
    return GemmProblem(m=m, n=oc, k=ks, lda=m, ldb=oc, ldc=oc, trans_a=True,
                       a_conv=(ih, iw, c, kh, kw_, oh, ow, sh, sw, ph, pw, dh, dw),
                       runtime_offsets=True, **strides, **kw)


def _want_t(x, dy, pr):
    ih, iw, c, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw = pr.a_conv
    full = GemmProblem(m=dy.shape[0], n=1, k=kh * kw * c, a_conv=pr.a_conv)
    return _patches(x.astype(np.float64), full).T @ dy.astype(np.float64)


def _slices_t(engine, stream, gi, batch, tile, seed):
    """The batch entries' products of geometry ``gi`` on ``tile`` (float64) and the float64
    patches^T @ diff_dst; nothing past C written."""
    pr = _problem_t(GEOMS_T[gi], batch)
    assert supports(pr, tile)
    rng = np.random.default_rng(seed + gi)
    n, ih, iw, c = GEOMS_T[gi][:4]
    x = rng.standard_normal((n, ih, iw, c)).astype(np.float32)
    dy = rng.standard_normal((pr.k * batch, pr.n)).astype(np.float32)
    got = _run(engine, stream, pr, tile, x, dy)
    assert (got[batch * pr.m * pr.n:] == 7.0).all()
    return (got[:batch * pr.m * pr.n].reshape(batch, pr.m, pr.n).astype(np.float64),
            _want_t(x, dy, pr))


@pytest.mark.parametrize("batch", [1, 2], ids=["whole", "two_slices"])
@pytest.mark.parametrize("gi", range(len(GEOMS_T)))
def test_gathered_transposed_a_matches_the_patches(engine, stream, gi, batch):
    """C = patches^T @ diff_dst (one product, or its two k slices as batch entries, added
    here as the split reduction would), on the SIMT tile every device runs."""
    parts, want = _slices_t(engine, stream, gi, batch, SIMT, 30)
    np.testing.assert_allclose(parts.sum(0), want, rtol=1e-4, atol=1e-4)


def test_transposed_gather_rules():
    pr = _problem_t(GEOMS_T[0])
    assert supports(pr, SIMT) and supports(pr, TC)
    assert not supports(pr, NvTile(32, 32, 16, 4, 4, kslices=2))
    ragged_k = _problem_t((1, 5, 5, 16, 3, 3, 1, 1, 1, 1, 1, 1, 32))  # 25 points
    assert not supports(ragged_k, SIMT)
    with pytest.raises(ValueError, match="a_conv"):  # lda must be m
        GemmProblem(m=144, n=8, k=16, lda=160, trans_a=True,
                    a_conv=(4, 4, 16, 3, 3, 4, 4, 1, 1, 1, 1, 1, 1))


@pytest.mark.parametrize("stages", [0, 3], ids=["registers", "cp_async"])
@pytest.mark.parametrize("batch", [1, 2], ids=["whole", "two_slices"])
@pytest.mark.parametrize("gi", range(len(GEOMS_T)))
def test_tensor_cores_transposed_gather(engine, stream, gi, batch, stages):
    if not (engine.info.is_gpu and engine.info.vendor_family == "nvidia"):
        pytest.skip("tensor-core kernels run on NVIDIA GPUs only (inline PTX mma.sync)")
    tile = NvTile(64, 64, 16, 8, 8, mma="tf32", wm=32, wn=32, stages=stages)
    parts, want = _slices_t(engine, stream, gi, batch, tile, 40)
    err = np.abs(parts.sum(0) - want).max() / np.abs(want).max()
    assert 1e-5 < err < 2e-3, err  # TF32's inputs, not f32's

# }}}


# {{{ scattered C rows: one phase of a strided backward data

def _scatter_case(seed):
    """A gathered product over a 3 x 4 grid of points per image (two images) whose rows go
    to every second row and third column of a 7 x 11 map (rows 22 + 2 * ... apart)."""
    pr0 = _problem(GEOMS[0], runtime_m="any")  # 2 images of 7 x 7 points, 16 channels
    geom = list(pr0.a_conv)
    geom[5:7] = [3, 4]  # the gathered grid (its rows read the same taps of the images)
    hp, wp, H, W = 3, 4, 7, 11
    rows = (hp, wp, H * W, 2 * W, 3)
    pr = GemmProblem(m=2 * hp * wp, n=pr0.n, k=pr0.k, ldb=pr0.n, ldc=pr0.n + 4,
                     a_conv=tuple(geom), c_rows=rows, runtime_offsets=True, runtime_m="any")
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, *geom[:3])).astype(np.float32)
    w = rng.standard_normal((pr.k, pr.n)).astype(np.float32)
    want = _patches(x.astype(np.float64), pr) @ w.astype(np.float64)
    at = np.array([t * H * W + a * 2 * W + b * 3 for t in range(2) for a in range(hp)
                   for b in range(wp)])
    return pr, x, w, want, at


def _scattered(got, pr, at):
    """C's rows where the scatter put them; everything else must still hold 7."""
    c = got.copy()
    rows = c[:(at.max() + 1) * pr.ldc].reshape(-1, pr.ldc)
    out = rows[at, :pr.n].astype(np.float64)
    rows[at, :pr.n] = 7.0
    assert (c == 7.0).all()  # nothing else written: other rows, padding columns, past C
    return out


def test_scattered_rows_match_the_patches(engine, stream):
    pr, x, w, want, at = _scatter_case(50)
    assert supports(pr, SIMT)
    got = _run(engine, stream, pr, SIMT, x, w)
    np.testing.assert_allclose(_scattered(got, pr, at), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stages", [0, 3], ids=["registers", "cp_async"])
def test_tensor_cores_scatter_rows(engine, stream, stages):
    if not (engine.info.is_gpu and engine.info.vendor_family == "nvidia"):
        pytest.skip("tensor-core kernels run on NVIDIA GPUs only (inline PTX mma.sync)")
    pr, x, w, want, at = _scatter_case(51)
    tile = NvTile(64, 64, 16, 8, 8, mma="tf32", wm=32, wn=32, stages=stages)
    got = _scattered(_run(engine, stream, pr, tile, x, w), pr, at)
    err = np.abs(got - want).max() / np.abs(want).max()
    assert 1e-5 < err < 2e-3, err  # TF32's inputs, not f32's


def test_scattered_rows_rules():
    pr, *_ = _scatter_case(0)
    assert pr.extent("c") == (2 * 77 - 77 + 2 * 22 + 9) * pr.ldc + pr.n
    with pytest.raises(ValueError, match="c_rows"):  # m not whole grids
        GemmProblem(m=10, n=8, k=16, c_rows=(3, 4, 77, 22, 3))
    with pytest.raises(ValueError, match="c_rows"):  # no epilogue
        GemmProblem(m=12, n=8, k=16, c_rows=(3, 4, 77, 22, 3), post_ops=(("eltwise", 1),))

# }}}
