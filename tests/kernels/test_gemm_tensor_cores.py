"""Tensor-core GEMM (``NvTile.mma``: TF32 m16n8k8, bf16 and f16 m16n8k16): tile rules from
device traits and the fpmath mode, the generated source, and on an NVIDIA GPU the products
against float64 with the error each mode is documented to have (strict: f32 rounding; tf32 and
f16: 10-bit mantissa inputs; bf16: 7-bit)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import pydnnl as dnnl
from pydnnl.kernels.gemm import GemmProblem
from pydnnl.kernels.gemm_nv import NvTile, build_gemm_nv, supports
from pydnnl.runtime.heuristics.gemm import nv_tile

H100 = SimpleNamespace(is_gpu=True, vendor_family="nvidia", compute_units=132,
                       max_work_group_size=1024, local_mem_bytes=48 * 1024, inline_ptx=True,
                       arch="sm_90")
TC = [NvTile(64, 128, 16, 8, 8, mma="tf32", wm=32, wn=32),
      NvTile(128, 128, 16, 8, 8, mma="tf32", wm=64, wn=64),
      NvTile(64, 64, 16, 8, 8, mma="tf32", wm=32, wn=32)]
# the documented bounds, relative to the largest |C|: TF32 keeps 10 mantissa bits of each input,
# f16 as many (standard normal inputs are far inside its range), bf16 7: 8x TF32's rounding
TF32_BOUND, STRICT_BOUND = 2e-3, 1e-5
BOUND = {"tf32": TF32_BOUND, "f16": TF32_BOUND, "bf16": 8 * TF32_BOUND}


def _pick(m, n, k, math="tf32", info=H100):
    t = nv_tile(info, GemmProblem(m=m, n=n, k=k, lda=k, ldb=n, ldc=n), math)
    return None if t is None else (t.bm, t.bn, t.mma)


def test_tf32_tiles_only_where_the_mode_and_the_device_allow():
    assert _pick(1024, 1024, 1024) == (64, 64, "tf32")  # too few 128x128 blocks: cp.async
    assert _pick(4096, 4096, 4096) == (128, 128, "tf32")
    assert _pick(1024, 1024, 1024, "strict") == (64, 128, None)
    assert _pick(25088, 256, 64) == (128, 128, None)  # short k: the SIMT kernel is faster
    # an RNN's per-step products (m = the batch) keep the SIMT thin tile (in two k-groups
    # where its blocks leave units idle) or the loopy family
    assert _pick(64, 2048, 512) == (16, 64, None)
    assert _pick(64, 512, 2048) is None
    assert _pick(25088, 64, 576) == (128, 64, "tf32")  # thin but tall: blocks enough
    assert _pick(1568, 256, 2304) == (64, 64, "tf32")  # few blocks: smaller ones
    for other in ({"arch": "sm_75"}, {"inline_ptx": False}, {"arch": "unknown"}):
        assert _pick(1024, 1024, 1024, info=SimpleNamespace(**{**vars(H100), **other}))[2] \
            is None
    assert _pick(1024, 1024, 1024, info=SimpleNamespace(**{**vars(H100),
                                                            "vendor_family": "amd"})) is None
    # the 16-bit modes take the same blocks with their own mma kind
    assert _pick(1024, 1024, 1024, "bf16") == (64, 128, "bf16")  # (cp.async: tf32 only)
    assert _pick(4096, 4096, 4096, "f16") == (128, 128, "f16")
    assert _pick(64, 2048, 512, "bf16") == (16, 64, None)
    # big blocks of a 16-bit kind with a plain A keep their tiles packed, 32 deep
    big = nv_tile(H100, GemmProblem(m=4096, n=4096, k=4096, lda=4096, ldb=4096, ldc=4096),
                  "bf16")
    assert (big.packed, big.bk) == (True, 32)
    assert not nv_tile(H100, GemmProblem(m=4096, n=4096, k=4096, lda=4096, ldb=4096,
                                         ldc=4096, trans_a=True), "bf16").packed
    assert not nv_tile(H100, GemmProblem(m=4096, n=4096, k=4096, lda=4096, ldb=4096,
                                         ldc=4096), "tf32").packed


def test_tile_checks_name_the_bad_field():
    with pytest.raises(ValueError, match="mma"):
        NvTile(64, 128, 16, 8, 8, mma="int8").check()
    with pytest.raises(ValueError, match="multiple of 16"):  # m16n8k16 needs 16-deep slices
        NvTile(64, 128, 8, 8, 8, mma="bf16", wm=32, wn=32).check()
    with pytest.raises(ValueError, match="packed"):
        NvTile(64, 128, 16, 8, 8, mma="tf32", wm=32, wn=32, packed=True).check()
    with pytest.raises(ValueError, match="warp tile 24x32"):
        NvTile(64, 128, 16, 8, 8, mma="tf32", wm=24, wn=32).check()


def test_source_rounds_once_and_uses_mma():
    pr = GemmProblem(m=100, n=72, k=64, lda=64, ldb=72, ldc=72, runtime_offsets=True)
    assert supports(pr, TC[0])
    src = build_gemm_nv(pr, TC[0]).source
    assert src.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") == 2 * 4
    assert "cvt.rna.tf32.f32" in src
    for kind in ("bf16", "f16"):  # k 16 per mma: half as many per slice, pairs packed
        src = build_gemm_nv(pr, NvTile(64, 128, 16, 8, 8, mma=kind, wm=32, wn=32)).source
        assert src.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32") == 2 * 4
        assert f"cvt.rn.{kind}x2.f32" in src and "cvt.rna.tf32" not in src


def test_fpmath_mode_reaches_the_plans_gemms():
    from pydnnl.runtime import fpmath
    from pydnnl.runtime.gemm import GemmShape, resolved

    shape = GemmShape(m=8, n=8, k=8, lda=8, ldb=8, ldc=8)
    assert resolved(shape).math == "strict"
    with fpmath.scope(dnnl.fpmath_mode.tf32):
        assert resolved(shape).math == "tf32"
        with fpmath.scope("any"):
            assert resolved(shape).math == "tf32"
        with fpmath.scope("bf16"):
            assert resolved(shape).math == "bf16"
        with fpmath.scope("f16"):
            assert resolved(shape).math == "f16"
    assert resolved(shape).math == "strict"


def _nvidia(engine):
    if not (engine.info.is_gpu and engine.info.vendor_family == "nvidia"):
        pytest.skip("the tensor-core kinds (tf32, bf16, f16) run on NVIDIA GPUs (inline PTX "
                    "mma.sync) only")


def _rel(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


PACKED = NvTile(128, 128, 32, 8, 8, mma="bf16", wm=64, wn=64, packed=True)
TC_ALL = TC + [PACKED]


@pytest.mark.parametrize("k", [128, 147], ids=["k128", "k147"])  # 147: a partial last slice
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("tile,kind", [(t, k) for t in range(len(TC_ALL))
                                       for k in ("tf32", "bf16", "f16")
                                       if not (TC_ALL[t].packed and k == "tf32")])
def test_tensor_core_kernel_against_float64(engine, stream, ta, tb, tile, kind, k):
    _nvidia(engine)
    from dataclasses import replace

    from pydnnl.runtime.kernel import Kernel

    m, n = 200, 136
    rng = np.random.default_rng(tile)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    pr = GemmProblem(m=m, n=n, k=k, trans_a=ta, trans_b=tb, lda=m if ta else k,
                     ldb=k if tb else n, ldc=n, beta=1.0, runtime_offsets=True)
    src = build_gemm_nv(pr, replace(TC_ALL[tile], mma=kind))
    C0 = rng.standard_normal((m, n)).astype(np.float32)
    mem = {w: dnnl.memory(dnnl.memory.desc([v.size], dnnl.memory.data_type.f32, "a"), engine,
                          v.ravel())
           for w, v in (("a", (A.T if ta else A).copy()), ("b", (B.T if tb else B).copy()),
                        ("c", C0))}
    args = {**{w: m_.buffer for w, m_ in mem.items()}, "a_off": np.int64(0),
            "b_off": np.int64(0), "c_off": np.int64(0)}
    Kernel(engine.context, engine.device, src)(stream, *[args[a] for a in src.arg_names])
    stream.wait()
    want = A.astype(np.float64) @ B.astype(np.float64) + C0
    err = _rel(mem["c"].to_numpy().reshape(m, n), want)
    # rounded like the kind's inputs, not like f32 (bf16 visibly coarser than 10-bit kinds)
    assert (2e-4 if kind == "bf16" else 1e-6) < err < BOUND[kind], err


def test_matmul_error_per_fpmath_mode(engine, stream):
    """The same matmul in each mode: strict within f32 rounding, tf32/f16/bf16 within their
    documented bounds and visibly coarser (the tensor cores ran)."""
    _nvidia(engine)
    MD, F32 = dnnl.memory.desc, dnnl.memory.data_type.f32
    m, n, k = 512, 512, 512
    rng = np.random.default_rng(1)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    errs = {}
    modes = dnnl.fpmath_mode
    for mode in (modes.strict, modes.tf32, modes.bf16, modes.f16):
        attr = dnnl.primitive_attr()
        attr.set_fpmath_mode(mode)
        pd = dnnl.matmul.primitive_desc(engine, MD([m, k], F32, "ab"), MD([k, n], F32, "ab"),
                                        MD([m, n], F32, "ab"), attr=attr)
        dst = dnnl.memory(pd.dst_desc(), engine)
        dnnl.matmul(pd).execute(stream, {dnnl.ARG_SRC: dnnl.memory(pd.src_desc(), engine, a),
                                         dnnl.ARG_WEIGHTS: dnnl.memory(pd.weights_desc(),
                                                                       engine, b),
                                         dnnl.ARG_DST: dst})
        stream.wait()
        errs[mode] = _rel(dst.to_numpy(), want)
    assert errs[modes.strict] < STRICT_BOUND, errs
    for mode in (modes.tf32, modes.bf16, modes.f16):
        assert 10 * STRICT_BOUND < errs[mode] < BOUND[mode.name], errs
    assert errs[modes.bf16] > 2 * errs[modes.tf32], errs  # 3 mantissa bits fewer


@pytest.mark.parametrize("ta", [False, True])
def test_tf32_runtime_m_and_k_one_program(engine, stream, ta):
    """One tensor-core program with k (and, A not transposed, m) as arguments computes
    every size of its class (m below one block and ragged, k several slices) with TF32's
    error."""
    _nvidia(engine)
    from pydnnl.kernels.source import launch_size
    from pydnnl.runtime.kernel import Kernel

    n, m0 = 136, 200
    proto = GemmProblem(m=m0, n=n, k=256, trans_a=ta, lda=m0 if ta else 256, ldb=n, ldc=n,
                        beta=1.0, runtime_offsets=True, runtime_m=None if ta else "any",
                        runtime_k=True)
    src = build_gemm_nv(proto, TC[0])
    kern = Kernel(engine.context, engine.device, src)
    rng = np.random.default_rng(3)
    for m, k in ([(m0, 128), (m0, 384)] if ta else [(5, 128), (64, 256), (m0, 384)]):
        lda = m0 if ta else k
        A = rng.standard_normal((m, k)).astype(np.float32)
        B = rng.standard_normal((k, n)).astype(np.float32)
        C0 = rng.standard_normal((m, n)).astype(np.float32)
        mem = {w: dnnl.memory(dnnl.memory.desc([v.size], dnnl.memory.data_type.f32, "a"),
                              engine, v.ravel())
               for w, v in (("a", (A.T if ta else A).copy()), ("b", B), ("c", C0))}
        args = {**{w: m_.buffer for w, m_ in mem.items()}, "a_off": np.int64(0),
                "b_off": np.int64(0), "c_off": np.int64(0), "m": np.int64(m),
                "ksize": np.int64(k)}
        assert lda == (m if ta else k)
        if not ta:
            assert launch_size(src, args)[1] == -(-m // TC[0].bm)
        kern(stream, *[args[a] for a in src.arg_names])
        stream.wait()
        want = A.astype(np.float64) @ B.astype(np.float64) + C0
        err = _rel(mem["c"].to_numpy().reshape(m, n), want)
        assert 1e-6 < err < TF32_BOUND, (m, k, err)


def test_tf32_runtime_source_free_of_the_sample():
    """Two samples of a run-time m and k generate one tensor-core source (one program)."""
    def prob(m, k):
        return GemmProblem(m=m, n=136, k=k, lda=k, ldb=136, ldc=136, runtime_offsets=True,
                           runtime_m="any", runtime_k=True)

    src = build_gemm_nv(prob(200, 128), TC[1])
    assert src.source == build_gemm_nv(prob(3000, 1024), TC[1]).source
    assert "long m" in src.source and "long ksize" in src.source
    assert src.grid == (str(src.local_size[0] * 2), "(m + 127) // 128")


def test_tf32_split_k_runs_on_tensor_cores(engine, stream):
    """A thin GEMM with a long k (an RNN step's backward product at 1760 channels) splits k
    into slices the tensor-core tiles take (a multiple of their depth), and the slices' sum
    has TF32's error."""
    _nvidia(engine)
    from pydnnl.runtime.gemm import GemmShape, get_gemm

    m, n, k = 32, 1760, 7040
    g = get_gemm(engine, GemmShape(m=m, n=n, k=k, lda=k, ldb=n, ldc=n, math="tf32"),
                 split=True)
    assert g.splits > 1 and (k // g.splits) % 16 == 0
    assert g.kernel.name == "gemm_nv" and "mma.sync" in g.kernel.src.source
    rng = np.random.default_rng(4)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    f32 = dnnl.memory.data_type.f32
    mem = {w: dnnl.memory(dnnl.memory.desc([v.size], f32, "a"), engine, v.ravel())
           for w, v in (("a", A), ("b", B), ("c", np.zeros((m, n), np.float32)),
                        ("p", np.zeros(g.part_elems, np.float32)))}
    g(stream, mem["a"].buffer, 0, mem["b"].buffer, 0, mem["c"].buffer, 0,
      mem["p"].buffer, 0)
    stream.wait()
    err = _rel(mem["c"].to_numpy().reshape(m, n), A.astype(np.float64) @ B.astype(np.float64))
    assert 10 * STRICT_BOUND < err < TF32_BOUND, err


def test_thin_products_take_tensor_cores_with_k_shared():
    """An RNN step's products at batch 32 (few blocks of C, a long k): with tf32 the rule for
    callers that bind the k shares' workspace gives a thin tensor-core tile, k shared where
    its blocks leave units idle; strict keeps the SIMT tile."""
    from pydnnl.runtime.gemm import _nv_tile

    def sliced(m, n, k, math):
        t = _nv_tile(H100, GemmProblem(m=m, n=n, k=k, lda=k, ldb=n, ldc=n), math, True)
        return None if t is None else (t.bm, t.bn, t.kslices, t.mma)

    # DeepSpeech2's LSTM (1760 channels, N 32): the step's forward and backward products
    # (up to 8 work-groups per unit, shares of at least 256)
    assert sliced(32, 7040, 1760, "tf32") == (32, 64, 5, "tf32")   # 110 blocks, shares of 352
    assert sliced(32, 1760, 7040, "tf32") == (32, 64, 22, "tf32")  # 28 blocks, shares of 320
    assert sliced(1760, 32, 7040, "bf16") == (64, 32, 22, "bf16")
    simt = (0, 0, 0, None)  # (None: the loopy family)
    assert (sliced(32, 7040, 1760, "strict") or simt)[3] is None
    assert (sliced(64, 2048, 512, "tf32") or simt)[3] is None  # 64 rows: the rule of nv_tile
    assert (sliced(32, 1760, 64, "tf32") or simt)[3] is None  # short k


@pytest.mark.parametrize("math", ["tf32", "bf16"])
def test_tensor_core_shares_match_float64(engine, stream, math):
    """The tensor-core tile with k shared among work-groups: the last arrival adds the shares'
    accumulators (each work-item's, in the mma fragments' order), over launches that must
    find the counters at zero again."""
    from pydnnl.kernels.gemm_nv import counters_at, workspace
    from pydnnl.runtime.kernel import Kernel

    tile = NvTile(32, 64, 16, 4, 4, mma=math, wm=16, wn=32, kslices=4, fence="ptx")
    pr = GemmProblem(m=40, n=136, k=512, lda=512, ldb=136, ldc=136, beta=1.0,
                     runtime_offsets=True)
    src = build_gemm_nv(pr, tile)
    assert "mma.sync" in src.source and "atomic_inc" in src.source
    _nvidia(engine)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((40, 512)).astype(np.float32)
    b = rng.standard_normal((512, 136)).astype(np.float32)
    c0 = rng.standard_normal((40, 136)).astype(np.float32)
    f32 = dnnl.memory.data_type.f32

    def mem(v):
        return dnnl.memory(dnnl.memory.desc([v.size], f32, "a"), engine, v.ravel().copy())

    size = workspace(pr, tile)
    ma, mb, mc, mw = mem(a), mem(b), mem(c0), mem(np.zeros(size, np.float32))
    vals = {"a": ma.buffer, "b": mb.buffer, "c": mc.buffer, "ws": mw.buffer,
            "a_off": np.int64(0), "b_off": np.int64(0), "c_off": np.int64(0),
            "ws_off": np.int64(0), "cnt_off": np.int64(counters_at(pr, tile))}
    kern = Kernel(engine.context, engine.device, src)
    want = c0.astype(np.float64)
    for _ in range(3):
        want = a.astype(np.float64) @ b.astype(np.float64) + want
        kern(stream, *[vals[x] for x in src.arg_names])
        stream.wait()
        err = _rel(mc.to_numpy().reshape(40, 136), want)
        assert 10 * STRICT_BOUND < err < BOUND[math], err


def test_shared_k_keeps_k_baked():
    """The tensor-core kernel takes k at run time, except where its blocks share k among
    work-groups: the shares are counted when it is built."""
    from pydnnl.runtime.gemm import GemmShape, _nv_problem

    shape = GemmShape(m=32, n=7040, k=1760, lda=1760, ldb=7040, ldc=7040, math="tf32")
    tile = NvTile(32, 64, 16, 4, 4, mma="tf32", wm=16, wn=32)
    assert _nv_problem(shape, tile).runtime_k
    shared = NvTile(32, 64, 16, 4, 4, mma="tf32", wm=16, wn=32, kslices=2)
    prob = _nv_problem(shape, shared)
    assert not prob.runtime_k and supports(prob, shared)


def _stages(m, n, k, math="tf32", **kw):
    t = nv_tile(H100, GemmProblem(m=m, n=n, k=k, **kw), math)
    return None if t is None else (t.bm, t.bn, t.stages)


def test_async_tiles_where_blocks_are_few():
    """tf32 GEMMs with too few blocks for two 128x128 per unit copy their tiles with
    cp.async (stages in flight); big ones, the 16-bit kinds and gathered A keep the
    register-staged kernel."""
    assert _stages(1568, 256, 2304) == (64, 64, 4)
    assert _stages(1568, 256, 2304, trans_b=True) == (64, 64, 4)
    assert _stages(1024, 1024, 1024, trans_a=True) == (64, 64, 4)
    assert _stages(25088, 64, 576) == (128, 64, 3)
    assert _stages(4096, 4096, 4096) == (128, 128, 0)
    assert _stages(1568, 256, 2304, "bf16") == (64, 64, 0)
    assert _stages(1568, 256, 2304, "f16") == (64, 64, 0)
    # tall products of 128 columns keep the register-staged 64x128 blocks; 64 columns take
    # 128x64 async blocks, gathered from images too
    assert _stages(25088, 128, 256) == (64, 128, 0)
    conv = (28, 28, 128, 3, 3, 28, 28, 1, 1, 1, 1, 1, 1)  # 3x3 on 28x28, 128 channels
    assert _stages(32 * 784, 128, 1152, a_conv=conv) == (64, 128, 0)
    conv = (56, 56, 64, 3, 3, 56, 56, 1, 1, 1, 1, 1, 1)
    assert _stages(32 * 3136, 64, 576, a_conv=conv) == (128, 64, 3)


ASYNC = NvTile(64, 64, 16, 8, 8, mma="tf32", wm=32, wn=32, stages=4)


def test_async_source_and_coverage():
    pr = GemmProblem(m=200, n=136, k=128, trans_b=True, runtime_offsets=True)
    src = build_gemm_nv(pr, ASYNC).source
    assert src.count("cp.async.commit_group") == 4  # 3 slices ahead of the loop, 1 in it
    assert "cp.async.wait_group 2;" in src and "pd_cp16(" in src and "pd_cp4x4(" in src
    assert "float4 ra[" not in src  # no registers between global and shared memory
    assert "__local float As[5120]" in src  # 4 stages of 64 rows of 16 + 4
    plain = GemmProblem(m=200, n=136, k=128, runtime_offsets=True)
    assert build_gemm_nv(plain, ASYNC, aligned=True).source.count(
        "pd_cp4x4(") == 1  # aligned: only the helper's definition
    assert supports(plain, ASYNC) and not supports(GemmProblem(m=200, n=136, k=136), ASYNC)
    with pytest.raises(ValueError, match="stages"):
        NvTile(64, 64, 16, 8, 8, mma="bf16", wm=32, wn=32, stages=4).check()
    with pytest.raises(ValueError, match="stages"):
        NvTile(64, 64, 16, 8, 8, mma="tf32", wm=32, wn=32, stages=1).check()
    with pytest.raises(ValueError, match="stages"):
        NvTile(64, 64, 16, 8, 8, stages=3).check()  # SIMT


ASYNC_TILES = [ASYNC, NvTile(128, 64, 16, 8, 8, mma="tf32", wm=64, wn=32, stages=3),
               NvTile(128, 128, 8, 8, 8, mma="tf32", wm=64, wn=64, stages=2)]


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("tile", range(len(ASYNC_TILES)))
@pytest.mark.parametrize("off", [0, 1], ids=["aligned", "offset1"])
def test_async_tiles_give_the_register_staged_bits(engine, stream, ta, tb, tile, off):
    """The cp.async kernel rounds each fragment to TF32 as it reads it and multiplies in the
    same order as the register-staged one (rounded when stored): the same bits, ragged
    edges and element-wise copies of misaligned operands included; both against float64."""
    _nvidia(engine)
    from pydnnl.runtime.kernel import Kernel

    m, n, k = 200, 136, 160
    rng = np.random.default_rng(11 + tile)
    A = rng.standard_normal((m, k)).astype(np.float32)
    B = rng.standard_normal((k, n)).astype(np.float32)
    C0 = rng.standard_normal((m, n)).astype(np.float32)
    pr = GemmProblem(m=m, n=n, k=k, trans_a=ta, trans_b=tb, lda=m if ta else k,
                     ldb=k if tb else n, ldc=n, beta=1.0, runtime_offsets=True)
    f32 = dnnl.memory.data_type.f32

    def run(t):
        src = build_gemm_nv(pr, t)
        mem = {w: dnnl.memory(dnnl.memory.desc([v.size + off], f32, "a"), engine,
                              np.concatenate([np.zeros(off, np.float32), v.ravel()]))
               for w, v in (("a", (A.T if ta else A).copy()), ("b", (B.T if tb else B).copy()),
                            ("c", C0))}
        args = {**{w: m_.buffer for w, m_ in mem.items()}, "a_off": np.int64(off),
                "b_off": np.int64(off), "c_off": np.int64(off)}
        Kernel(engine.context, engine.device, src)(stream, *[args[a] for a in src.arg_names])
        stream.wait()
        return mem["c"].to_numpy()[off:].reshape(m, n)

    t = ASYNC_TILES[tile]
    got = run(t)
    staged = run(NvTile(t.bm, t.bn, 16, 8, 8, mma="tf32", wm=t.wm, wn=t.wn))
    want = A.astype(np.float64) @ B.astype(np.float64) + C0
    assert 1e-6 < _rel(got, want) < TF32_BOUND
    assert np.array_equal(got, staged)


@pytest.mark.parametrize("tile", [TC[0], ASYNC], ids=["staged", "async"])
def test_pair_stores_match_element_stores(engine, stream, tile):
    """The tensor-core store writes a fragment's two columns as one float2 where C is
    16-byte aligned (n and ldc multiples of 4) and element by element otherwise: a bias per
    column, beta, a sum and a relu post-op give the same bits both ways, match float64, and
    leave C's padding columns alone."""
    _nvidia(engine)
    from pydnnl.constants import algorithm as A
    from pydnnl.runtime.kernel import Kernel

    m, n, k, ldc = 200, 136, 128, 140
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c0 = rng.standard_normal((m, ldc)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    pr = GemmProblem(m=m, n=n, k=k, lda=k, ldb=n, ldc=ldc, beta=1.0, runtime_offsets=True,
                     bias=((0, ((1, 0, ()), (1, 1, ()))), (1, n), n),
                     post_ops=(("sum", 2.0, 0), ("eltwise", int(A.eltwise_relu), 0.0, 0.0)))
    src = build_gemm_nv(pr, tile)
    assert "__global float2* cp" in src.source
    f32 = dnnl.memory.data_type.f32
    outs = []
    for off in (0, 1):  # aligned: float2 stores; one element off: element stores
        mem = {w: dnnl.memory(dnnl.memory.desc([v.size + off], f32, "a"), engine,
                              np.concatenate([np.zeros(off, np.float32), v.ravel()]))
               for w, v in (("a", a), ("b", b), ("c", c0))}
        mbias = dnnl.memory(dnnl.memory.desc([n], f32, "a"), engine, bias)
        args = {**{w: m_.buffer for w, m_ in mem.items()}, "bias": mbias.buffer,
                "a_off": np.int64(off), "b_off": np.int64(off), "c_off": np.int64(off)}
        Kernel(engine.context, engine.device, src)(stream, *[args[x] for x in src.arg_names])
        stream.wait()
        outs.append(mem["c"].to_numpy()[off:].reshape(m, ldc))
    prior = c0[:, :n].astype(np.float64)
    want = np.maximum(a.astype(np.float64) @ b + prior + bias + 2.0 * prior, 0)
    assert np.array_equal(outs[0], outs[1])
    assert _rel(outs[0][:, :n], want) < TF32_BOUND
    assert np.array_equal(outs[0][:, n:], c0[:, n:])


def test_gathered_a_keeps_k_baked():
    """A tensor-core GEMM gathering A from images keeps k baked (the kernel counts the taps
    at build time), with or without an epilogue: a run-time k would leave the device's rule
    without a kernel and the convolution on patch matrices."""
    from pydnnl.runtime.gemm import GemmShape, _nv_problem

    geom = (56, 56, 64, 3, 3, 56, 56, 1, 1, -1, -1, -1, -1)  # (a backward data's gather)
    tile = NvTile(128, 64, 16, 8, 8, mma="tf32", wm=64, wn=32, stages=3)
    shape = GemmShape(m=32 * 3136, n=64, k=576, lda=576, ldb=64, ldc=64, a_conv=geom,
                      math="tf32")
    prob = _nv_problem(shape, tile)
    assert not prob.runtime_k and supports(prob, tile)
