"""The hand-written NVIDIA SGEMM (pydnnl.kernels.gemm_nv) against numpy.

The kernel is plain OpenCL C (no PTX), so it runs on every device present: CPU runtimes check
the indexing, the float4 and scalar load paths, edges, batches and offsets; an NVIDIA GPU in
addition checks the runtime's choice of it (``get_gemm``) on the shapes it is selected for."""
from __future__ import annotations

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels.gemm import GemmProblem
from pydnnl.kernels.gemm_nv import NvTile, aligned_offsets, build_gemm_nv, supports
from pydnnl.runtime.kernel import Kernel

TILES = {
    "128x128x8/8x8": NvTile(128, 128, 8, 8, 8),
    "64x128x16/8x8": NvTile(64, 128, 16, 8, 8),
    "128x64x16/8x4": NvTile(128, 64, 16, 8, 4),
    "64x64x16/4x4": NvTile(64, 64, 16, 4, 4),
    "64x64x16/8x4": NvTile(64, 64, 16, 8, 4),
    "32x64x16/4x4": NvTile(32, 64, 16, 4, 4),
    "64x32x16/4x4": NvTile(64, 32, 16, 4, 4),
    # k-groups: each a share of k's slices, their tiles added in shared memory
    "32x64x16/4x4/k2": NvTile(32, 64, 16, 4, 4, ksplit=2),
    "32x32x16/4x4/k4": NvTile(32, 32, 16, 4, 4, ksplit=4),
    "16x64x16/4x4/k4": NvTile(16, 64, 16, 4, 4, ksplit=4),
    "16x64x16/4x4/k2": NvTile(16, 64, 16, 4, 4, ksplit=2),
}


def _buf(eng, host: np.ndarray):
    m = dnnl.memory(dnnl.memory.desc([host.size], dnnl.memory.data_type.f32,
                                     dnnl.memory.format_tag.a), eng, host)
    return m


def _run(engine, stream, pr: GemmProblem, tile: NvTile, seed: int = 0, aligned: bool = False):
    """Run the kernel of ``pr`` on random operands; return (got, want) of C's buffer."""
    rng = np.random.default_rng(seed)
    ao, bo, co = ((4, 8, 4) if aligned else (7, 3, 5)) if pr.runtime_offsets else (0, 0, 0)
    a = rng.standard_normal(pr.size("a") + ao).astype(np.float32)
    b = rng.standard_normal(pr.size("b") + bo).astype(np.float32)
    c = rng.standard_normal(pr.size("c") + co).astype(np.float32)
    want = c.astype(np.float64)
    for t in range(pr.batch):
        def mat(buf, off, stride, rows, cols, ld, t=t):
            start = off + t * stride
            return np.lib.stride_tricks.as_strided(
                buf[start:], (rows, cols), (ld * 4, 4)).astype(np.float64)

        A = mat(a, ao + pr.a_offset, pr.stride_a, *((pr.k, pr.m) if pr.trans_a else
                                                      (pr.m, pr.k)), pr.lda)
        B = mat(b, bo + pr.b_offset, pr.stride_b, *((pr.n, pr.k) if pr.trans_b else
                                                      (pr.k, pr.n)), pr.ldb)
        A = A.T if pr.trans_a else A
        B = B.T if pr.trans_b else B
        cs = co + pr.c_offset + t * pr.stride_c
        for i in range(pr.m):
            row = want[cs + i * pr.ldc: cs + i * pr.ldc + pr.n]
            row[:] = pr.alpha * (A[i] @ B) + pr.beta * row
    src = build_gemm_nv(pr, tile, aligned)
    kern = Kernel(engine.context, engine.device, src)
    ma, mb, mc = _buf(engine, a), _buf(engine, b), _buf(engine, c)
    vals = {"a": ma.buffer, "b": mb.buffer, "c": mc.buffer, "a_off": np.int64(ao),
            "b_off": np.int64(bo), "c_off": np.int64(co)}
    kern(stream, *[vals[n] for n in src.arg_names])
    stream.wait()
    return mc.to_numpy().reshape(-1), want


CASES = [
    # (m, n, k, trans_a, trans_b, alpha, beta, lda pad, ldb pad, ldc pad, batch, offsets)
    (128, 128, 64, False, False, 1.0, 0.0, 0, 0, 0, 1, False),
    (70, 132, 48, False, False, 1.0, 0.0, 0, 0, 0, 1, True),
    (130, 68, 32, True, False, 0.5, 1.0, 4, 0, 3, 1, True),
    (33, 100, 64, False, True, 1.0, -0.5, 0, 5, 0, 1, True),
    (64, 57, 16, True, True, 2.0, 0.0, 8, 0, 1, 1, True),
    (40, 20, 32, False, False, 1.0, 0.25, 1, 3, 0, 3, True),
    (96, 72, 48, False, True, 1.0, 0.0, 4, 4, 4, 2, False),
    # k-groups' shares: 8 slices of 16 (4 groups: 2 each), a ragged m and n
    (37, 70, 128, False, False, 1.0, 0.5, 0, 0, 0, 1, True),
    (20, 64, 128, True, False, 1.0, 0.0, 4, 4, 0, 2, False),
    # a partial last slice (k not a multiple of the tiles' 8 or 16): its loads past k read
    # zeros, along k (plain A, transposed B) and across it (transposed A, plain B)
    (70, 64, 147, False, False, 1.0, 0.0, 0, 0, 0, 1, True),
    (36, 40, 21, True, True, 1.0, 0.5, 1, 2, 0, 1, True),
    (64, 24, 5, False, True, 1.0, 0.0, 0, 0, 0, 2, False),
    (48, 68, 3, True, False, 0.5, 0.0, 0, 0, 3, 1, False),
]


def _problem(case, runtime: bool) -> GemmProblem:
    m, n, k, ta, tb, al, be, pa, pb, pc, batch, _ = case
    lda = (m if ta else k) + pa
    ldb = (k if tb else n) + pb
    ldc = n + pc
    extra = {}
    if batch > 1:
        extra = dict(batch=batch, stride_a=(k if ta else m) * lda + 4,
                     stride_b=(n if tb else k) * ldb + 2, stride_c=m * ldc + 1)
    return GemmProblem(m=m, n=n, k=k, trans_a=ta, trans_b=tb, alpha=al, beta=be, lda=lda,
                       ldb=ldb, ldc=ldc, runtime_offsets=runtime, **extra)


def _applicable():
    """(case, tile, aligned) the kernel serves: a tile covers a problem whose k is a multiple
    of its k-slice; the aligned copy only offsets and strides that are multiples of 4 (the
    launcher picks the general copy for the others). GPUs run every one; CPU devices, which
    check the indexing of a kernel written for NVIDIA's (each compiling for 1-1.5 s there),
    a covering part: each tile on two cases and one aligned copy, each case once, every fifth
    (the others are ``gpu_sweep``)."""
    entries = []
    for case, spec in enumerate(CASES):
        pr = _problem(spec, spec[-1])
        offs = (4, 8, 4) if pr.runtime_offsets else (0, 0, 0)
        for name, t in TILES.items():
            if not supports(pr, t):
                continue
            entries.append((case, name, False))
            if aligned_offsets(pr, *offs):
                entries.append((case, name, True))
    core = set(range(0, len(entries), 5))
    seen: dict = {}
    for i, (case, name, aligned) in enumerate(entries):
        # per tile its general copy on its first two cases and an aligned one past its first
        # case; per case its first entry
        cases = seen.setdefault(name, [])
        if (not aligned and len(cases) < 2 and case not in cases) or ("case", case) not in seen \
                or (aligned and ("aligned", name) not in seen and case != cases[0]):
            core.add(i)
            if aligned:
                seen[("aligned", name)] = True
        if not aligned and case not in cases:
            cases.append(case)
        seen[("case", case)] = True
    return [pytest.param(case, name, aligned,
                         id=f"{case}-{name}-{'aligned' if aligned else 'general'}",
                         marks=() if i in core else pytest.mark.gpu_sweep)
            for i, (case, name, aligned) in enumerate(entries)]


@pytest.mark.parametrize("case,tile,aligned", _applicable())
def test_gemm_nv_matches_numpy(engine, stream, tile, case, aligned):
    t = TILES[tile]
    pr = _problem(CASES[case], CASES[case][-1])
    got, want = _run(engine, stream, pr, t, seed=case, aligned=aligned)
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 1e-5 * scale * max(1, pr.k / 64)


def test_gemm_nv_aligned_and_unaligned_offsets(engine, stream):
    """The float4 path (offsets multiples of 4) and the scalar path give the same sums."""
    pr = GemmProblem(m=64, n=64, k=32, lda=32, ldb=64, ldc=64, runtime_offsets=True)
    t = TILES["64x64x16/4x4"]
    rng = np.random.default_rng(3)
    a = rng.standard_normal(pr.size("a") + 8).astype(np.float32)
    b = rng.standard_normal(pr.size("b") + 8).astype(np.float32)
    src = build_gemm_nv(pr, t)
    kern = Kernel(engine.context, engine.device, src)
    ma, mb = _buf(engine, a), _buf(engine, b)
    for off in (0, 4, 1, 2):
        mc = _buf(engine, np.zeros(pr.size("c") + 8, np.float32))
        vals = {"a": ma.buffer, "b": mb.buffer, "c": mc.buffer, "a_off": np.int64(off),
                "b_off": np.int64(off), "c_off": np.int64(off)}
        kern(stream, *[vals[n] for n in src.arg_names])
        stream.wait()
        A = a[off:off + 64 * 32].reshape(64, 32).astype(np.float64)
        B = b[off:off + 32 * 64].reshape(32, 64).astype(np.float64)
        got = mc.to_numpy()[off:off + 64 * 64].reshape(64, 64)
        np.testing.assert_allclose(got, A @ B, rtol=1e-5, atol=1e-4)


def _dense(dims) -> tuple:
    """A reorder-style layout of a dense row-major tensor of ``dims`` (broadcast dims 1)."""
    per, stride = [], 1
    for d in reversed(dims):
        per.append((1, stride if d > 1 else 0, ()))
        stride *= d
    return (0, tuple(reversed(per)))


# (m, n, k, batch, epi_swap, beta, chain): bias over the destination's last dim, then a chain
EPI_CASES = [
    (70, 68, 32, 1, False, 0.0, "relu"),
    (64, 40, 16, 1, False, 0.0, "sum+binary_mul_row+tanh"),
    (36, 44, 16, 2, False, 0.5, "binary_add_tensor+sum"),
    (40, 36, 16, 3, True, 0.0, "binary_max_col+relu"),
]


@pytest.mark.parametrize("case", range(len(EPI_CASES)))
def test_gemm_nv_epilogue(engine, stream, case):
    """Bias and post-ops fused into the store (float4 and scalar paths, batches with the
    destination's batch dim, C holding the destination transposed) against numpy."""
    from pydnnl.constants import algorithm as A

    m, n, k, batch, swap, beta, chain = EPI_CASES[case]
    rng = np.random.default_rng(10 + case)
    dm, dn = (n, m) if swap else (m, n)  # the destination's matrix dims
    dst_dims = ([batch] if batch > 1 else []) + [dm, dn]
    bias = rng.standard_normal(dn).astype(np.float32)
    bdims = [1] * (len(dst_dims) - 1) + [dn]
    ops, operands, want_ops = [], {}, []
    for part in chain.split("+"):
        if part == "sum":
            ops.append(("sum", 2.0, 0))
            want_ops.append(("sum", None))
        elif part in ("relu", "tanh"):
            alg = A.eltwise_relu if part == "relu" else A.eltwise_tanh
            ops.append(("eltwise", int(alg), 0.0, 0.0))
            want_ops.append((part, None))
        else:
            _, name, where = part.split("_")
            dims = list(dst_dims)
            if where == "row":  # one value per destination row
                dims[-1] = 1
            elif where == "col":
                dims[:-1] = [1] * (len(dims) - 1)
            x = rng.standard_normal(dims).astype(np.float32)
            alg = {"add": A.binary_add, "mul": A.binary_mul, "max": A.binary_max}[name]
            operands[f"po{len(ops)}_src1"] = x
            ops.append(("binary", int(alg), _dense(dims), tuple(dims), x.size))
            want_ops.append((name, x.astype(np.float64)))
    ldc = n + (3 if case % 2 else 0)
    extra = dict(batch=batch, stride_a=m * k, stride_b=k * n, stride_c=m * ldc) if batch > 1 \
        else {}
    pr = GemmProblem(m=m, n=n, k=k, beta=beta, lda=k, ldb=n, ldc=ldc, **extra,
                     bias=(_dense(bdims), tuple(bdims), dn), post_ops=tuple(ops),
                     epi_batch=(batch,) if batch > 1 else (), epi_swap=swap)
    a = rng.standard_normal(batch * m * k).astype(np.float32)
    b = rng.standard_normal(batch * k * n).astype(np.float32)
    c = rng.standard_normal(batch * m * ldc).astype(np.float32)
    A64 = a.astype(np.float64).reshape(batch, m, k)
    B64 = b.astype(np.float64).reshape(batch, k, n)
    C64 = c.astype(np.float64).reshape(batch, m, ldc)[:, :, :n]
    v = A64 @ B64 + beta * C64  # [batch, m, n]
    v = np.swapaxes(v, 1, 2) if swap else v  # destination order
    prior = np.swapaxes(C64, 1, 2) if swap else C64
    v = v + bias
    for name, x in want_ops:
        if name == "sum":
            v = 2.0 * prior + v
        elif name == "relu":
            v = np.maximum(v, 0)
        elif name == "tanh":
            v = np.tanh(v)
        else:
            x = x.reshape((batch if x.shape[0] == batch and batch > 1 else 1,) + x.shape[-2:])
            v = {"add": np.add, "mul": np.multiply, "max": np.maximum}[name](v, x)
    want = np.swapaxes(v, 1, 2) if swap else v
    src = build_gemm_nv(pr, TILES["32x64x16/4x4"])
    kern = Kernel(engine.context, engine.device, src)
    bufs = {"a": _buf(engine, a), "b": _buf(engine, b), "c": _buf(engine, c),
            "bias": _buf(engine, bias)}
    bufs.update({nm: _buf(engine, x.reshape(-1)) for nm, x in operands.items()})
    kern(stream, *[bufs[nm].buffer for nm in src.arg_names])
    stream.wait()
    got = bufs["c"].to_numpy().reshape(batch, m, ldc)
    np.testing.assert_allclose(got[:, :, :n], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    # the padding columns of C are never written
    np.testing.assert_array_equal(got[:, :, n:], c.reshape(batch, m, ldc)[:, :, n:])


def test_supports_rules():
    t = NvTile()
    assert supports(GemmProblem(m=5, n=8, k=16), t)
    assert supports(GemmProblem(m=5, n=8, k=12), t)  # a partial slice of k
    # ... but not shared among k-groups, nor with k at run time
    assert not supports(GemmProblem(m=5, n=8, k=24), NvTile(32, 64, 16, 4, 4, ksplit=2))
    assert not supports(GemmProblem(m=5, n=8, k=12, runtime_k=True), t)
    assert not supports(GemmProblem(m=5, n=6, k=16), t)  # plain B, n % 4
    assert supports(GemmProblem(m=5, n=6, k=16, trans_b=True), t)
    assert not supports(GemmProblem(m=6, n=8, k=16, trans_a=True), t)  # transposed A, m % 4
    assert supports(GemmProblem(m=8, n=8, k=16, post_ops=(("eltwise", 1, 0.0, 0.0),)), t)
    assert not supports(GemmProblem(m=8, n=8, k=16, b_layout="panel16"), t)  # packed B
    with pytest.raises(ValueError):
        NvTile(128, 128, 8, 8, 6).check()


def test_runtime_selects_it_on_nvidia(engine, stream):
    """On NVIDIA GPUs ``get_gemm`` runs the hand-written kernel for large GEMMs, and its
    launcher (bound launches, offsets, rows) computes the right product."""
    from pydnnl.runtime.gemm import GemmShape, get_gemm

    if not (engine.info.is_gpu and engine.info.vendor_family == "nvidia"):
        pytest.skip("the runtime picks gemm_nv on NVIDIA GPUs only")
    m, n, k = 1024, 1024, 512
    g = get_gemm(engine, GemmShape(m=m, n=n, k=k, lda=k, ldb=n, ldc=n), static_b=True,
                 split=True)
    assert g.kernel.name == "gemm_nv" and g.splits == 1 and not g.packed
    assert g._kernel_for(None, 4, None, 4, None, 4) is not g.kernel  # the aligned copy
    assert g._kernel_for(None, 1, None, 4, None, 4) is g.kernel
    rng = np.random.default_rng(0)
    a = rng.standard_normal(m * k + 4).astype(np.float32)
    b = rng.standard_normal(k * n + 4).astype(np.float32)
    for off in (4, 1):
        ma, mb = _buf(engine, a), _buf(engine, b)
        mc = _buf(engine, np.zeros(m * n + 4, np.float32))
        g(stream, ma.buffer, off, mb.buffer, off, mc.buffer, off)
        stream.wait()
        A = a[off:off + m * k].reshape(m, k).astype(np.float64)
        B = b[off:off + k * n].reshape(k, n).astype(np.float64)
        got = mc.to_numpy()[off:off + m * n].reshape(m, n)
        np.testing.assert_allclose(got, A @ B, rtol=1e-4, atol=1e-3)
    from pydnnl.kernels.source import launch_size

    gs = g.global_size_for_rows(100)
    assert gs[1] * g.kernel.src.local_size[1] < launch_size(g.kernel.src, {"m": m})[1]


def test_tile_rules_on_an_h100_like_device():
    """The blocking picked per shape for a device with an H100's traits (the measured choices
    documented in runtime.heuristics.gemm); other vendors never get the kernel."""
    from types import SimpleNamespace

    from pydnnl.runtime.heuristics.gemm import nv_tile

    h100 = SimpleNamespace(is_gpu=True, vendor_family="nvidia", compute_units=132,
                           max_work_group_size=1024, local_mem_bytes=48 * 1024)

    def pick(m, n, k, info=h100, ta=False, tb=False):
        t = nv_tile(info, GemmProblem(m=m, n=n, k=k, lda=m if ta else k, ldb=k if tb else n,
                                      ldc=n, trans_a=ta, trans_b=tb))
        return None if t is None else (t.bm, t.bn)

    assert pick(4096, 4096, 4096) == (128, 128)
    assert pick(1024, 1024, 1024) == (64, 128)
    # both operands k-major (a weight gradient): 128x64 blocks instead of 64x128
    assert pick(1024, 1024, 1024, ta=True) == (128, 64)
    assert pick(1024, 1024, 1024, ta=True, tb=True) == (64, 128)
    assert pick(4096, 4096, 4096, ta=True) == (128, 128)
    assert pick(1280, 2048, 512) == (64, 128)
    assert pick(512, 512, 512) == (128, 64)
    # thin m: 32x64 blocks would leave units idle (64 of them): 16x64 in two k-groups
    assert pick(64, 2048, 512) == (16, 64)
    assert nv_tile(h100, GemmProblem(m=64, n=2048, k=512, lda=512, ldb=2048,
                                     ldc=2048)).ksplit == 2
    assert pick(64, 2048, 528) == (32, 64)  # 33 slices of 16: no even share
    assert pick(64, 8192, 512) == (32, 64)  # 256 blocks fill the units
    assert pick(2048, 64, 512) == (64, 32)
    assert pick(64, 2048, 8192) is None  # long k: the loopy family splits it
    # k not a multiple of 16: a partial last slice (ResNet-50 conv1's 147 taps x channels),
    # the 8-deep blocks first where their slices divide k
    assert pick(100352, 64, 147) == (128, 64)
    # tall GEMMs whose n is a block's width (a convolution's rows x 64 or 128 channels)
    assert pick(12544, 64, 576) == (64, 32) and pick(100352, 64, 64) == (128, 64)
    assert pick(25088, 128, 256) == (64, 128) and pick(12544, 128, 1152) == (64, 128)
    assert pick(6272, 128, 2304) == (64, 32) and pick(3136, 128, 1152) == (64, 32)
    assert pick(2048, 128, 2304) is None
    assert pick(1024, 1024, 147) == (64, 128)
    assert pick(4096, 4096, 440) == (128, 128) and pick(1024, 1024, 440) == (128, 128)
    assert pick(16, 4096, 512) is None
    assert pick(64, 512, 512) is None
    assert pick(1024, 1024, 1024, SimpleNamespace(**{**vars(h100), "vendor_family": "amd"})) \
        is None


def test_primitives_on_it_with_compiled_in_offsets(engine, stream, monkeypatch):
    """matmul (bias, post-ops, a sub-matrix src at an offset) and inner product on the
    hand-written kernel as the runtime launches it on NVIDIA GPUs (forced here on every
    device): a copy with the plan's offsets compiled in, against numpy."""
    from pydnnl.runtime import gemm as rg

    tile = NvTile(32, 64, 16, 4, 4)
    monkeypatch.setattr(rg.rules, "nv_tile",
                        lambda info, prob, math="strict": tile if supports(prob, tile)
                        else None)
    monkeypatch.setattr(rg, "_cache", {})
    rng = np.random.default_rng(5)
    M, K, N = 40, 48, 76
    big = rng.standard_normal((M + 3) * K).astype(np.float32)  # src starts 3 rows in
    w, bias = rng.standard_normal((K, N)).astype(np.float32), rng.standard_normal(N)
    f32 = dnnl.memory.data_type.f32
    whole = dnnl.memory.desc([M + 3, K], f32, "ab")
    src_md = whole.submemory_desc([M, K], [3, 0])
    ops = dnnl.post_ops()
    ops.append_eltwise(dnnl.algorithm.eltwise_relu, 0.0, 0.0)
    attr = dnnl.primitive_attr()
    attr.set_post_ops(ops)
    pd = dnnl.matmul.primitive_desc(engine, src_md, dnnl.memory.desc([K, N], f32, "ab"),
                                    dnnl.memory.desc([1, N], f32, "ab"),
                                    dnnl.memory.desc([M, N], f32, "ab"), attr)
    src = dnnl.memory(whole, engine, big.reshape(M + 3, K))
    args = {dnnl.ARG_SRC: dnnl.memory(src_md, engine, src.get_data_handle()),
            dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(), engine, w),
            dnnl.ARG_BIAS: dnnl.memory(dnnl.memory.desc([1, N], f32, "ab"), engine,
                                         bias[None].astype(np.float32)),
            dnnl.ARG_DST: dnnl.memory(pd.dst_desc(), engine)}
    prim = dnnl.matmul(pd)
    prim.execute(stream, args)
    stream.wait()
    A = big.reshape(M + 3, K)[3:].astype(np.float64)
    want = np.maximum(A @ w + bias, 0)
    np.testing.assert_allclose(args[dnnl.ARG_DST].to_numpy(), want, rtol=1e-5, atol=1e-5)
    gemms = [g for g in rg._cache.values() if g.nv_tile is not None]
    assert gemms and all(len(g._static) == 1 for g in gemms)  # the compiled-in copy ran


# {{{ run-time m and k

def _run_sizes(engine, stream, kern, proto: GemmProblem, sizes, seed=0):
    """Run the one program ``kern`` (built for ``proto``, m and/or k at run time) for every
    ``(m, k)`` in ``sizes`` at unaligned offsets; assert each against numpy float64, and
    that nothing past C's last row is written."""
    rng = np.random.default_rng(seed)
    ta, n = proto.trans_a, proto.n
    for m, k in sizes:
        lda = proto.lda if (ta or proto.lda != proto.k) else k  # a dense A follows k
        pr = GemmProblem(m=m, n=n, k=k, trans_a=ta, lda=lda, ldb=proto.ldb, ldc=proto.ldc)
        ao, bo, co = 3, 1, 2
        a = rng.standard_normal(pr.size("a") + ao).astype(np.float32)
        b = rng.standard_normal(pr.size("b") + bo).astype(np.float32)
        c = rng.standard_normal(pr.size("c") + co + 2 * proto.ldc).astype(np.float32)
        A = np.lib.stride_tricks.as_strided(a[ao:], (k, m) if ta else (m, k), (lda * 4, 4))
        B = np.lib.stride_tricks.as_strided(b[bo:], (k, n), (proto.ldb * 4, 4))
        want = c.astype(np.float64)
        C = np.lib.stride_tricks.as_strided(want[co:], (m, n), (proto.ldc * 8, 8))
        C[...] = (A.T if ta else A).astype(np.float64) @ B + proto.beta * C
        ma, mb, mc = _buf(engine, a), _buf(engine, b), _buf(engine, c)
        vals = {"a": ma.buffer, "b": mb.buffer, "c": mc.buffer, "a_off": np.int64(ao),
                "b_off": np.int64(bo), "c_off": np.int64(co), "m": np.int64(m),
                "ksize": np.int64(k)}
        kern(stream, *[vals[nm] for nm in kern.src.arg_names])
        stream.wait()
        got = mc.to_numpy()
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max() * max(1, k / 64), (m, k)
        end = co + (m - 1) * proto.ldc + n
        np.testing.assert_array_equal(got[end:], c[end:])  # rows past m untouched


@pytest.mark.parametrize("tile", ["32x64x16/4x4", "64x32x16/4x4"])
def test_runtime_m_and_k_one_program(engine, stream, tile):
    """One program with ``m`` and ``ksize`` as arguments computes every m (below one tile,
    not a multiple of it, several tiles) and every k (whole k slices) of its class; its
    launch grid follows m."""
    from pydnnl.kernels.source import launch_size

    t = TILES[tile]
    proto = GemmProblem(m=70, n=72, k=48, lda=48, ldb=76, ldc=75, beta=0.5,
                        runtime_offsets=True, runtime_m="any", runtime_k=True)
    src = build_gemm_nv(proto, t)
    assert src.global_size is None and src.arg_names[-2:] == ("m", "ksize")
    assert launch_size(src, {"m": 70})[1] == -(-70 // t.bm)
    kern = Kernel(engine.context, engine.device, src)
    _run_sizes(engine, stream, kern, proto,
               [(1, 16), (5, 48), (t.bm, 32), (t.bm + 1, 16), (70, 48), (70, 64)])


def test_runtime_k_weight_gradient_one_program(engine, stream):
    """A transposed A (a weight gradient: k = T*N) with k at run time and m baked."""
    proto = GemmProblem(m=36, n=72, k=64, trans_a=True, lda=40, ldb=72, ldc=72, beta=1.0,
                        runtime_offsets=True, runtime_k=True)
    src = build_gemm_nv(proto, TILES["64x64x16/4x4"])
    assert src.grid is None and "ksize" in src.arg_names and "m" not in src.arg_names
    kern = Kernel(engine.context, engine.device, src)
    _run_sizes(engine, stream, kern, proto, [(36, 16), (36, 80), (36, 64)], seed=1)


def test_runtime_sizes_key_and_source_free_of_the_sample():
    """Problems that differ only in a run-time m or k share their cache key and generate
    the same source (the kernel cache may serve either with the other's program)."""
    from pydnnl.kernels.gemm import key_problem

    t = TILES["64x128x16/8x8"]
    tc = NvTile(64, 128, 16, 8, 8, mma="tf32", wm=32, wn=32)
    for ta in (False, True):
        def prob(m, k, ta=ta):
            return GemmProblem(m=36 if ta else m, n=256, k=k, trans_a=ta,
                               lda=40 if ta else k, runtime_offsets=True,
                               runtime_m=None if ta else "any", runtime_k=True)
        p1, p2 = prob(100, 64), prob(1000, 512)
        assert key_problem(p1) == key_problem(p2)
        for tile in (t, tc):
            for aligned in (False, True):
                assert build_gemm_nv(p1, tile, aligned).source == \
                    build_gemm_nv(p2, tile, aligned).source
    assert key_problem(GemmProblem(m=100, n=256, k=64)) != \
        key_problem(GemmProblem(m=1000, n=256, k=64))


def _simt_everywhere(monkeypatch) -> NvTile:
    """Make ``get_gemm`` pick the hand-written SIMT kernel (one small tile) on every device,
    with an empty launcher cache; returns the tile."""
    from pydnnl.runtime import gemm as rg

    tile = TILES["32x64x16/4x4"]
    monkeypatch.setattr(rg.rules, "nv_tile",
                        lambda info, prob, math="strict": tile if supports(prob, tile)
                        else None)
    monkeypatch.setattr(rg, "_cache", {})
    return tile


def test_runtime_launcher_one_program_for_every_m(engine, stream, monkeypatch):
    """``get_gemm`` on the hand-written SIMT kernel (forced here on every device): GEMMs of
    the same tile class that differ in m (an RNN's T*N) share their programs, the copies
    with compiled-in offsets included; k stays baked in the SIMT kernel (measured: see
    ``runtime.gemm._nv_problem``); every launch computes right."""
    from pydnnl.runtime.gemm import GemmShape, get_gemm

    tile = _simt_everywhere(monkeypatch)
    rng = np.random.default_rng(7)
    n = 68
    gemms = []
    for m, k, ta in ((40, 32, False), (70, 32, False), (9, 48, False), (24, 32, True),
                     (24, 80, True)):
        shape = GemmShape(m=m, n=n, k=k, lda=m if ta else k, ldb=n, ldc=n, trans_a=ta,
                          beta=0.0)
        g = get_gemm(engine, shape, static_b=True)
        assert g.nv_tile == tile and "ksize" not in g.kernel.src.arg_names
        assert ("m" in g.kernel.src.arg_names) == (not ta)
        gemms.append((g, ta))
        a = rng.standard_normal(m * k + 4).astype(np.float32)
        b = rng.standard_normal(k * n + 4).astype(np.float32)
        A = a[4:].reshape((k, m) if ta else (m, k)).astype(np.float64)
        want = (A.T if ta else A) @ b[4:].reshape(k, n).astype(np.float64)
        ma, mb = _buf(engine, a), _buf(engine, b)
        for how in ("call", "bound"):
            mc = _buf(engine, np.zeros(m * n + 4, np.float32))
            if how == "call":  # the run-time-offset kernel
                g(stream, ma.buffer, 4, mb.buffer, 4, mc.buffer, 4)
            else:  # a plan's launch: the copy with these offsets compiled in
                for b_ in g.bound((ma.buffer, 4, mb.buffer, 4, mc.buffer, 4)):
                    b_.launch(stream, {})
            stream.wait()
            got = mc.to_numpy()[4:].reshape(m, n)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    plain = [g for g, ta in gemms if not ta]
    wgrad = [g for g, ta in gemms if ta]
    same_k = plain[:2]  # (40, 32) and (70, 32): one program each
    assert all(g.kernel is same_k[0].kernel for g in same_k)
    assert all(g._static[(4, 4, 4)] is same_k[0]._static[(4, 4, 4)] for g in same_k)
    assert plain[2].kernel is not plain[0].kernel  # another k
    assert wgrad[0].kernel is not wgrad[1].kernel
    # the rows of a shrinking plan (an RNN step's active sequences): whole bm row groups
    assert plain[1].global_size_for_rows(33)[1] == 2


def test_runtime_k_on_tensor_cores_only():
    """The launcher's problem for the NVIDIA kernel: m at run time for both kernels, k only
    for the TF32 one (measured rules in ``runtime.gemm._nv_problem``)."""
    from pydnnl.runtime.gemm import GemmShape, _nv_problem

    simt, tc = TILES["64x128x16/8x8"], NvTile(64, 128, 16, 8, 8, mma="tf32", wm=32, wn=32)
    sh = GemmShape(m=1024, n=1024, k=512, lda=512, ldb=1024, ldc=1024)
    assert _nv_problem(sh, simt).runtime_m == "any" and not _nv_problem(sh, simt).runtime_k
    assert _nv_problem(sh, tc).runtime_m == "any" and _nv_problem(sh, tc).runtime_k
    wgrad = GemmShape(m=512, n=2048, k=2048, lda=512, ldb=2048, ldc=2048, trans_a=True)
    assert _nv_problem(wgrad, tc).runtime_m is None and _nv_problem(wgrad, tc).runtime_k

# }}}


def test_runtime_m_with_a_column_epilogue_one_program(engine, stream, monkeypatch):
    """A bias per column and an eltwise post-op (a channels-last convolution's forward) keep
    m a run-time size on the hand-written kernel: two GEMMs that differ in m share one
    program, and each stores ``relu(A @ B + bias)`` only in its own rows."""
    from pydnnl.constants import algorithm as A
    from pydnnl.runtime.gemm import GemmShape, get_gemm

    tile = _simt_everywhere(monkeypatch)
    rng = np.random.default_rng(11)
    n, k = 68, 32
    bias = rng.standard_normal(n).astype(np.float32)
    mbias = _buf(engine, bias)
    epi = dict(bias=((0, ((1, 0, ()), (1, 1, ()))), (1, n), n),
               post_ops=(("eltwise", int(A.eltwise_relu), 0.0, 0.0),))
    kernels = []
    for m in (40, 70):
        g = get_gemm(engine, GemmShape(m=m, n=n, k=k, lda=k, ldb=n, ldc=n, **epi),
                     static_b=True)
        assert g.nv_tile == tile and "m" in g.kernel.src.arg_names
        kernels.append(g.kernel)
        a = rng.standard_normal(m * k).astype(np.float32)
        b = rng.standard_normal(k * n).astype(np.float32)
        c0 = rng.standard_normal(m * n + 2 * n).astype(np.float32)  # rows past m: untouched
        ma, mb, mc = _buf(engine, a), _buf(engine, b), _buf(engine, c0)
        vals = {"a": ma.buffer, "b": mb.buffer, "c": mc.buffer, "bias": mbias.buffer,
                "a_off": np.int64(0), "b_off": np.int64(0), "c_off": np.int64(0),
                "m": np.int64(m)}
        g.kernel(stream, *[vals[nm] for nm in g.kernel.src.arg_names])
        stream.wait()
        want = np.maximum(a.reshape(m, k).astype(np.float64) @ b.reshape(k, n) + bias, 0)
        got = mc.to_numpy()
        np.testing.assert_allclose(got[:m * n].reshape(m, n), want, rtol=1e-5,
                                   atol=1e-5 * np.abs(want).max())
        np.testing.assert_array_equal(got[m * n:], c0[m * n:])
    assert kernels[0] is kernels[1]


def test_batched_and_tall_blocks_follow_the_measured_rules():
    """The blocks the rules give the convolution GEMMs they were measured on (H200-like
    traits): conv1's backward-weights slices (147 x 64, n = 64) the 128x64 blocks, res2a's
    (64 x 256) the 64x64 ones, 64 x 64 slices the thin ones, Winograd res3a's products
    (3136 x 128) the 64x128."""
    from types import SimpleNamespace

    from pydnnl.runtime.heuristics.gemm import nv_tile

    h200 = SimpleNamespace(is_gpu=True, vendor_family="nvidia", compute_units=132,
                           max_work_group_size=1024, local_mem_bytes=48 * 1024,
                           inline_ptx=True, arch="sm_90")

    def pick(m, n, k, batch):
        t = nv_tile(h200, GemmProblem(m=m, n=n, k=k, lda=k, ldb=n, ldc=n, batch=batch))
        return None if t is None else (t.bm, t.bn)

    assert pick(147, 64, 512, 196) == (128, 64)
    assert pick(256, 64, 512, 98) == (128, 64)
    assert pick(147, 64, 784, 16) == (64, 32)  # mb 1: too few 128x64 blocks for the units
    assert pick(64, 256, 896, 112) == (64, 64)  # res2a_branch1's slices
    assert pick(1152, 128, 784, 16) == (64, 64)  # v1.5 res3a_branch2b's
    assert pick(4608, 512, 784, 2) == (128, 64)
    assert pick(1024, 256, 784, 8) == (128, 64)  # res4b_branch2a's: lost on 64x64
    assert pick(64, 64, 512, 196) == (32, 64)
    t = nv_tile(h200, GemmProblem(m=3136, n=128, k=128, lda=128, ldb=128, ldc=128, batch=16))
    assert (t.bm, t.bn) == (64, 128)
    t = nv_tile(h200, GemmProblem(m=128, n=128, k=784, lda=784, ldb=128, ldc=128, batch=64))
    assert (t.bm, t.bn) == (128, 64)
