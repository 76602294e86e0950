"""Device rules of the GEMM family: default tuning parameters, the search space, shape-specific
defaults and when to split k. Every rule reads :class:`~pydnnl.engine.DeviceInfo` traits and
stands next to the measurement behind it; ``info=None`` means a generic CPU (offline use)."""
from __future__ import annotations

from dataclasses import replace

from ...kernels.gemm import (
    DEFAULT_CPU_PARAMS,
    DEFAULT_GPU_PARAMS,
    GemmProblem,
    local_mem_bytes,
    normalize_params,
    params_fit,
)
from ...kernels.gemm_nv import MMA_KINDS, NvTile, smem_bytes, supports


def _limits(info) -> tuple[bool, int, tuple, int, int]:
    """(gpu, max work-group size, max work-item sizes, local memory bytes, CPU SIMD width)."""
    if info is None:
        return False, 1024, (1024, 1024, 1024), 32768, 8
    # CPUs: the native float width (Intel's runtime *prefers* 1 on AVX-512 machines, whose
    # 8-wide tiles then ran 130-240 GFLOP/s where 16-wide ones run 300-350)
    simd = int(info.simd_width or 1) if info.is_cpu else 8
    return (info.is_gpu, info.max_work_group_size, tuple(info.max_work_item_sizes),
            info.local_mem_bytes, 16 if simd >= 16 else 8)


def _vector_registers(simd: int) -> int:
    """Vector registers of a CPU whose float SIMD width is ``simd`` (AVX2: 16; AVX-512: 32)."""
    return 32 if simd >= 16 else 16


def cpu_tiles(simd: int) -> list[tuple[int, int]]:
    """(rows, cols) register tiles for a CPU, best first: every tile keeps its accumulators
    and one row of B vectors inside the vector register file, plus one register for the
    broadcast A value where the ISA cannot broadcast from memory inside the FMA (AVX2;
    AVX-512's embedded broadcast can)."""
    w = 16 if simd >= 16 else 8 if simd >= 8 else 4
    cand = [(4, 3 * w), (6, 2 * w), (4, 2 * w), (2, 4 * w), (8, w), (3, 3 * w), (2, 2 * w),
            (1, 4 * w), (1, 2 * w), (1, w)]
    if w == 16:
        cand = [(8, 3 * w), (7, 4 * w), (8, 2 * w), (6, 4 * w), (16, w), (6, 2 * w),
                (4, 4 * w)] + cand
    regs = _vector_registers(simd)
    bcast = 0 if w >= 16 else 1
    return [(r, c) for r, c in dict.fromkeys(cand) if r * (c // w) + c // w + bcast <= regs]


# AVX-512 tiles (2-core Xeon, Sapphire Rapids class, Intel's CPU runtime, 2026-11, GFLOP/s;
# numpy/OpenBLAS in brackets): 8x48 wins where B outgrows the cache and is wide (1024^3: 351
# against 286 for 7x64 [339]; 64x2048x512: 305/221 [285]; 3200x2048x512: 335/278 [389];
# 128x4096x1024: 357/268 [312]), 7x64 elsewhere (ResNet-50's GEMMs at mb 1: 3136x64x256:
# 269/227 [271]; 196x256x1024: 355/300 [275]; 196x1024x256: 317/292 [303]; 12544x64x147:
# 281/202 [284]; 7x64 has since lost to 8x32 unrolled by 4, below). With a long k,
# consecutive work-groups should share a B panel (m_inner):
# 2048^3 344 against 222 [385], 512x2048x3200 323/235 [361]; at k <= 1024 it lost 0-10%.
# At most 16 columns (an RNN's input-gradient GEMM over 8 features, a classifier head) 16x16
# tiles waste nothing: 512x8x512 99 against 40 for 7x64 [108], 512x10x512 111/45.
_AVX512_WIDE_TILE = (8, 48)
_AVX512_NARROW_TILE = (16, 16)
# The 8x48 tile's k loop unrolled by 2 (its 24 accumulators and twice 3 B vectors still fit
# the 32 registers): 2026-11, quiet machine, GFLOP/s median of 5 rounds, 1 -> 2:
# 64x2048x512 238-258 -> 253-284, 1280x2048x512 243-251 -> 263-272, 3200x2048x512 246-248
# -> 265, 1024^3 245 -> 261-267, 128x4096x1024 233-251 -> 263-264. The 7x64 tile spills with
# it (512^3 253-256 -> 136-140, 196x256x1024 233-258 -> 138-139): it keeps 1.
_AVX512_WIDE_K_UNROLL = 2
# Tried on the 8x48 kernel (2026-11-28, kernel time, Intel's runtime, GFLOP/s at 64 and
# 3200 x 2048 x 512): OpenCL's prefetch() of B 8 or 16 k steps ahead, once per k pair (96
# floats) or once per cache line, halved the speed (362-382 -> 173-209, 331-363 -> 169-208);
# not taken. C stored with vstore16 instead of lane by lane: taken (kernels/gemm.py,
# _vector_stores). With vector stores, same session, kernel time, 2 rounds (64x2048x512,
# 3200x2048x512): unrolled by 2 312-321 and 289-335, by 4 160-177 and 140-174 (spills), by 1
# 282-298 and 266-297; m_inner at 64 rows 167-310 and 255-279: the rules stay.
# GEMMs that give few 7x64 tiles per core (an RNN step of a small model) balance better over
# the cores in 8x32 tiles with the k loop unrolled by 4: 64x512x128 125 -> 157 GFLOP/s,
# 64x128x512 154 -> 180 (80 and 20 tiles of 7x64 on two cores). Measured again (2026-11,
# quiet machine, medians of 4 rounds, 7x64 -> 8x32 unrolled by 4), 8x32 wins at every size
# tried, so it is the default below B's cache size: 196x256x1024 272-279 -> 317, 512^3
# 255-265 -> 311, 3136x64x256 243-244 -> 268, 1024x1024x256 242 -> 285, 200x1024x256 (the
# MNIST LSTM's step) 239-242 -> 292, 64x1024x256 223 -> 274, 400x1024x256 244 -> 285.
_AVX512_SMALL_TILE = (8, 32)
_AVX512_SMALL_K_UNROLL = 4
# Wide tiles over many row tiles: each work-item computes WIDE_M_LOOP row tiles of one B panel
# back to back (m_loop), the panel read again while the core still holds it. 2-core AVX-512
# Xeon, Intel's runtime, machine shared, isolated kernels, 12-20 interleaved rounds per
# session, median per-round speed ratio against one row tile, m_loop 4 (2): 3200x2048x512
# 1.046, 1.047, 1.031 (1.049, 1.048, 1.024); 1024^3 1.05, 1.175, 1.04 (1.00, 1.00, 0.94);
# 2048^3 with m_inner 1.051 (1.06, 1.083); 1280x2048x512 1.169 (1.025, 1.104); 128x4096x1024
# 1.124 (1.005); 256x2048x512 1.100; 64x2048x512, 8 row tiles, 1.011 and 1.008 (0.999): from
# WIDE_M_LOOP_MIN_TILES row tiles up. From 8 row tiles up as well (the 64-row RNN steps, whose
# ratio is 1.01) where the work-items left give every compute unit WIDE_M_LOOP_MIN_ITEMS: the
# step's GEMM then shares its program with the layer GEMM of the same k and n (run-time m),
# which the first-ever LSTM creation would otherwise generate and compile twice (LSTM 512
# T=50 N=64 inference: 4 -> 3 kernels, one GEMM's generation and build saved).
_AVX512_WIDE_M_LOOP = 4
_AVX512_WIDE_M_LOOP_MIN_TILES = 16
_AVX512_WIDE_M_LOOP_SHARED_TILES = 8
_AVX512_WIDE_M_LOOP_MIN_ITEMS = 16


def _cpu_shape_default(info, prob: GemmProblem, default: dict) -> dict:
    """16-wide CPUs: the register tile and the work order for ``prob`` (rules above)."""
    cache = info.core_cache_bytes
    item = prob.dtype.itemsize
    wide = prob.k * prob.n * item > cache and prob.n > 256
    rows, cols = _AVX512_WIDE_TILE if wide else _AVX512_SMALL_TILE
    ku = _AVX512_WIDE_K_UNROLL if wide else _AVX512_SMALL_K_UNROLL
    if prob.n <= _AVX512_NARROW_TILE[1]:
        (rows, cols), ku = _AVX512_NARROW_TILE, 1
    m_inner = prob.k * cols * item > cache // 8 and prob.m > 8 * rows
    ml = 1
    row_tiles = -(-prob.m // rows)
    if (rows, cols) == _AVX512_WIDE_TILE and (
            row_tiles >= _AVX512_WIDE_M_LOOP_MIN_TILES
            or (row_tiles >= _AVX512_WIDE_M_LOOP_SHARED_TILES
                and -(-row_tiles // _AVX512_WIDE_M_LOOP) * -(-prob.n // cols)
                >= _AVX512_WIDE_M_LOOP_MIN_ITEMS * max(1, info.compute_units))):
        ml = _AVX512_WIDE_M_LOOP
    if ((rows, cols) == _AVX512_WIDE_TILE and prob.k * cols * item > cache // 8
            and row_tiles >= _AVX512_WIDE_M_LOOP_SHARED_TILES):
        # a long k from 8 row tiles up (an RNN step's input-gradient GEMM: 64 rows, k the
        # gates): m_inner and 4 row tiles per work-item, as its layer GEMM over T*N rows, so
        # that both share one program (run-time m). 2-core AVX-512 Xeon, Intel's runtime,
        # kernel time, both in one process, 6 alternating rounds (min ms, m_inner=False and
        # 1 row tile -> this): 64x512x2048 0.503 -> 0.457, 64x1024x4096 2.63 -> 1.97,
        # 64x512x1536 0.349 -> 0.328
        m_inner, ml = True, _AVX512_WIDE_M_LOOP
    cand = dict(default, rows=rows, cols=cols, vec=16, m_inner=m_inner, k_unroll=ku, m_loop=ml)
    return cand if is_valid(prob, normalize_params(cand), info) else default


# 8-wide (AVX2) CPUs: 6x16 tiles with the k loop unrolled by 4 (12 accumulators, 2 B vectors,
# 1 broadcast: 15 of the 16 registers), and narrower tiles over at most 16 columns, where
# wider panels are mostly padding. 2-core AMD EPYC (Zen 3), 2026-11-29, kernel GFLOP/s,
# medians of 5 interleaved rounds on a quiet machine, 4x24 (the former default) / 4x24
# unrolled by 4 / 6x16 unrolled by 4 [numpy]: Intel's runtime 64x2048x512 57 / 103 / 102
# [90]; 1280x2048x512 120 / 124 / 124 [122]; 1024^3 116 / 124 / 122 [119]; 3136x64x256
# 46 / 80 / 84 [64]; 196x256x1024 62 / 105 / 112 [94]; 784x128x1152 97 / 119 / 135 [90];
# 12544x64x147 54 / 63 / 59 [63]; PoCL 64x2048x512 92 / 108 / 106, 3136x64x256 81 / 73 /
# 89, 784x128x1152 115 / 126 / 144. Narrow (Intel's runtime, medians of 4 rounds, 4x24 ->
# this tile): 8x8 up to 8 columns (an RNN's input gradient over 8 features, a Winograd
# weight gradient's 8 x 8 products): 512x8x512 28-30 -> 68-69, 2048x8x304 29-31 -> 66-70;
# 6x16 up to 16: 512x16x512 58-62 -> 85-90, 512x12x512 43-46 -> 62-65 (8x8 there: 51-57)
_AVX2_NARROW_TILES = ((8, (8, 8)), (16, (6, 16)))
_AVX2_TILE = (6, 16)
_AVX2_K_UNROLL = 4


def _cpu8_shape_default(info, prob: GemmProblem, default: dict) -> dict:
    """8-wide CPUs: the tiles of ``_AVX2_TILE`` and ``_AVX2_NARROW_TILES``."""
    (rows, cols), ku = _AVX2_TILE, _AVX2_K_UNROLL
    for widest, tile in _AVX2_NARROW_TILES:
        if prob.n <= widest:
            (rows, cols), ku = tile, 1
            break
    cand = dict(default, rows=rows, cols=cols, vec=8, k_unroll=ku)
    return cand if is_valid(prob, normalize_params(cand), info) else default


def default_params(info=None) -> dict:
    """Heuristic parameters for a device.

    CPUs: a 4x24 register tile in float8 vectors (12 accumulators + 3 B vectors + 1 broadcast
    = AVX2's 16 vector registers), one work-item per work-group, B pre-packed in 24-column
    panels; 8x48 in float16 vectors on 16-wide (AVX-512) CPUs, refined per shape by
    :func:`shape_default`.
    GPUs: 16x16 work-items, 4x4 register tiles (8x4 on NVIDIA) over 16-deep local-memory tiles.
    """
    gpu, max_wg, _, _, simd = _limits(info)
    if not gpu:
        p = dict(DEFAULT_CPU_PARAMS)
        if simd >= 16:
            r, c = cpu_tiles(16)[0]
            p.update(rows=r, cols=c, vec=16)
        return p
    p = dict(DEFAULT_GPU_PARAMS)
    if info.vendor_family == "nvidia":
        # H100, OpenCL, fp32: 8x4 per work-item gave 23 TFLOP/s at 1024^3 and 1280x2048x512,
        # 31 at 4096^3 (8x8: 13 / 19 / 34; 4x4: 22 / 22 / 25)
        p.update(rows=8, cols=4, wg=(16, 16), k_tile=16)
    if p["wg"][0] * p["wg"][1] > max_wg:
        p["wg"] = (8, 8)
    return p


def is_valid(problem: GemmProblem, params: dict, info=None) -> bool:
    """Whether ``params`` can build and launch for ``problem`` on the device.

    ``problem`` may have a plain B while ``params['packed_b']`` is set: the caller packs."""
    if not params_fit(problem, params):
        return False
    p = normalize_params(params)
    _, max_wg, items, local, _ = _limits(info)
    wn, wm = p["wg"]
    if wn * wm > max_wg or wn > items[0] or wm > items[1]:
        return False
    return local_mem_bytes(problem, p) <= local


def search_space(problem: GemmProblem, info=None) -> list[dict]:
    """Valid parameter points worth timing for ``problem`` on the device, likeliest first.

    Time a prefix when time is short. Points with ``packed_b`` need B packed first; a problem
    whose B is already packed only gets points reading that layout. Pruned: work-groups over
    the device limits, local tiles over the local memory, CPU register tiles over the vector
    register file, tiles taller or wider than the problem.
    """
    gpu, _, _, _, simd = _limits(info)
    m, n = problem.m, problem.n
    out: list[dict] = []
    if not gpu:
        w = 16 if simd >= 16 else 8
        tiles = [(r, c) for r, c in cpu_tiles(simd)
                 if r <= max(1, m) and c <= max(w, -(-n // w) * w)] or [(1, w)]
        packs = (True, False) if problem.panel_width is None else (True,)
        base = dict(DEFAULT_CPU_PARAMS, vec=w)
        for packed in packs:
            for r, c in tiles[:3]:
                for ku in (1, 4):
                    out.append(dict(base, rows=r, cols=c, k_unroll=ku, packed_b=packed))
            r, c = tiles[0]
            mt = -(-m // r)
            for ml in sorted({4, mt if mt <= 32 else 4} - {1}):
                if ml <= mt:
                    out.append(dict(base, rows=r, cols=c, m_loop=ml, packed_b=packed))
            out.append(dict(base, rows=r, cols=c, m_inner=True, packed_b=packed))
            for r, c in tiles[3:]:
                for ku in (1, 4):
                    out.append(dict(base, rows=r, cols=c, k_unroll=ku, packed_b=packed))
            out.append(dict(base, rows=tiles[0][0], cols=tiles[0][1], wg=(4, 1),
                            packed_b=packed))
    else:
        out.append(default_params(info))
        for rows, cols in ((8, 4), (4, 4), (8, 8), (4, 8), (2, 2), (2, 4), (4, 2), (1, 4),
                           (2, 8)):
            for wg in ((16, 16), (16, 8), (8, 8), (32, 8), (32, 4), (64, 4)):
                for kt in (16, 8, 32, 64):
                    out.append(dict(DEFAULT_GPU_PARAMS, rows=rows, cols=cols, wg=wg, k_tile=kt))
    seen, result = set(), []
    for p in out:
        p = normalize_params(p)
        if problem.panel_width is not None and p["cols"] != problem.panel_width:
            continue
        key = tuple(sorted(p.items()))
        if key in seen or not is_valid(problem, p, info):
            continue
        seen.add(key)
        result.append(p)
    return result


# Measured on an H100 through NVIDIA's OpenCL (exhaustive searches, 2026-11): 64-row GEMMs
# (the RNN recurrence) want 4x2 tiles on 32x4 work-items over 64-deep local tiles (17 us at
# 64x2048x512, 41 us at 64x4096x1024; 2x2 on 32x8 over 32: 20 and 49 us); large ones 8x4
# tiles on 32x8 over 32.
_NVIDIA_SMALL_M = {"rows": 4, "cols": 2, "wg": (32, 4), "k_tile": 64}
# up to 4 rows (a GEMV, e.g. an RNN step at batch 1): one row per work-item, 64 x 2 of them
# along N (1 x 7040 x 1760: 30.7 us split in 4, against 42 us with the 64-row tiles)
_NVIDIA_TINY_M = {"rows": 1, "cols": 2, "wg": (64, 2), "k_tile": 64}
_NVIDIA_LARGE = {"rows": 8, "cols": 4, "wg": (32, 8), "k_tile": 32}


def shape_default(info, prob: GemmProblem, default: dict, batch: int = 1) -> dict:
    """The device default, refined by the problem's shape where measurements say so;
    ``batch``: how many such GEMMs one launch computes (their work-groups fill the device
    together)."""
    if info is not None and info.is_cpu and not default.get("local_prefetch") \
            and _limits(info)[4] >= 16 and prob.dtype.itemsize == 4:
        return _cpu_shape_default(info, prob, default)
    if info is not None and info.is_cpu and not default.get("local_prefetch") \
            and _limits(info)[4] == 8 and prob.dtype.itemsize == 4 and default["vec"] == 8:
        return _cpu8_shape_default(info, prob, default)
    if info is None or not info.is_gpu or info.vendor_family != "nvidia" \
            or not default.get("local_prefetch"):
        return default
    tiles = _NVIDIA_TINY_M if prob.m <= 4 else _NVIDIA_SMALL_M if prob.m <= 256 else \
        _NVIDIA_LARGE
    if tiles is _NVIDIA_LARGE and 4 * _groups(prob, tiles) * batch < info.compute_units:
        # the 64 x 128 blocks would leave most units idle (a convolution's backward data at
        # mb 1, 784 x 128 x 512: 13 work-groups, 78 us on the H200): 16 x 64 blocks, 8x more
        # (98 work-groups: 34 us). Not for a batch that fills the units (a weight gradient
        # split into 49 slices of 512 x 128 x 512 ran 0.22 -> 0.32 ms with the small blocks),
        # nor where a quarter of the units has work (the RNN weight gradients, e.g. 512 x
        # 2048 x 3200 in 128 work-groups, which the split-k rule then cuts into 8 slices)
        tiles = _NVIDIA_SMALL_M
    cand = dict(default, **tiles)
    return cand if is_valid(prob, normalize_params(cand), info) else default


def _groups(prob: GemmProblem, tiles: dict) -> int:
    """Work-groups of the local-tile kernel with ``tiles`` over ``prob``."""
    bm, bn = tiles["wg"][1] * tiles["rows"], tiles["wg"][0] * tiles["cols"]
    return -(-prob.m // bm) * -(-prob.n // bn) * max(1, prob.batch)


# Split-k: fewest k per slice, the most work-groups per compute unit a split may reach, and
# the k from which a GEMM splits even when its grid already covers the compute units.
_SPLIT_MIN_K = 256
_SPLIT_GROUPS_PER_CU = 8
_SPLIT_LONG_K = 1536
_SPLIT_SHORTEST_K = 1024  # below: never (at k = 512 the extra launch always cost more)


def split_k(info, m: int, n: int, k: int, params: dict) -> int:
    """How many k slices to cut an ``m x n x k`` GEMM into (1: no split).

    GPUs only, and only GEMMs whose C covers at most half the compute units with work-groups
    (few rows and columns and a long k, like the backward recurrence of an RNN: 64 x 512 x
    2048 ran 121 us per step on an H100 unsplit, 6 of the 9.4 ms of an LSTM forward+backward)
    or whose k is at least ``_SPLIT_LONG_K``. Then k is cut into the most power-of-two slices
    that keep at least ``_SPLIT_MIN_K`` each and at most ``_SPLIT_GROUPS_PER_CU`` work-groups
    per unit. Measured on an H100 with ``benchmarks/gemm_split.py``: 64x512x2048 56 -> 20 us
    (8 slices), 32x1760x7040 348 -> 79 us (16), 1x7040x1760 84 -> 42 us (4), 512x2048x3200
    307 -> 243 us (8); GEMMs with a short k (below ``_SPLIT_SHORTEST_K``), or that fill the
    units already with k below ``_SPLIT_LONG_K`` (64x2048x512, 64x4096x1024, 1024^3), only
    lose by it: an RNN forward step of 64 x 512 x 512 split in two ran 1.2 -> 1.7 ms.
    """
    if info is None or not info.is_gpu or not params.get("local_prefetch") \
            or params.get("packed_b"):
        return 1
    bm = params["wg"][1] * params["rows"]
    bn = params["wg"][0] * params["cols"]
    groups = -(-m // bm) * -(-n // bn)
    units = max(1, info.compute_units)
    if k < _SPLIT_SHORTEST_K or (2 * groups > units and k < _SPLIT_LONG_K):
        return 1
    s = 1
    while (groups * s * 2 <= _SPLIT_GROUPS_PER_CU * units and k % (2 * s) == 0
           and k // (2 * s) >= _SPLIT_MIN_K):
        s *= 2
    return s


def splitk_reduce_wg(info) -> int:
    """Work-group width of the split-k reduction: 64 on GPUs (two warps), 16 on CPUs."""
    return 64 if info is None or info.is_gpu else 16


# The hand-written SGEMM (pydnnl.kernels.gemm_nv), measured on an H100 through NVIDIA's OpenCL
# (2026-11, aligned kernel, us; cuBLAS fp32 in brackets; benchmarks/results/h100_gemm_nv.txt):
# 128x128 blocks of 8x8 tiles over 8-deep slices (125 registers: two blocks per SM) win once
# they fill about two per SM (4096^3: 2862, 64x128: 2894, 128x64: 3276 [2670]); below that
# 64x128 blocks of 8x8 over 16-deep slices (128 work-items) as long as they give nearly one
# block per SM (1024^3: 57.8, 128x64 of 8x4: 64.4, 128x128: 101.7 [58]; 1280x2048x512: 72.9,
# 64x64 of 8x4: 71.4, 128x64: 83.4 [71.5]), else 128x64 blocks of 8x4 over 16-deep slices (80
# registers). GEMMs with fewer than 256 rows (or columns) but at least 1024 of the other and a
# short k take 32x64 (64x32) blocks of 4x4 (64x2048x512: 15.8, 64x64: 22.2, the loopy family's
# tuned small-M tiles 17-19.5 [14.7]); smaller ones, and long k (where the loopy family splits
# k over the compute units), keep the loopy family.
# A transposed and B plain (a weight gradient: both operands k-major) skips the 64x128
# blocks: their kernel ran 8-35% slower there than on the other forms (ptxas: 143 registers
# against 154, no spills), the 128x64 blocks were not (H200, kernel us, 64x128 NN / 64x128
# TN / 128x64 TN: 1024^3 59.0 / 76.4 / 62.3, 512x512x6272 325 / 434 / 347, 256x256x25088
# 1734 / 2077 / 1659, 2048x512x3200 232 / 253 / 205, 1024x1000x256 20.3 / 24.0 / 21.0; the
# 128x128 blocks are the same on both forms)
_NV_BIG = NvTile(128, 128, 8, 8, 8)
_NV_WIDE = NvTile(64, 128, 16, 8, 8)
_NV_MID = NvTile(128, 64, 16, 8, 4)
_NV_THIN_M = NvTile(32, 64, 16, 4, 4)
_NV_THIN_N = NvTile(64, 32, 16, 4, 4)
_NV_MIN_DIM = 256
_NV_THIN_MIN = (32, 1024)  # (the short side, the long side) of a thin GEMM
# thin-m GEMMs whose 32x64 blocks leave compute units idle: 16x64 blocks, each work-group two
# k-groups walking half of k's slices (NvTile.ksplit), their tiles added in shared memory
# before the store. H200, 64x512x2048 (matmul; the inner product mb64ic512oc2048 alike),
# kernel time from profiling events / benchdnn min ms against cuBLAS in the same process:
# 32x64 16.6-17.2 us / 0.0158-0.0160 ms (0.82-0.84x); 32x64 in 2 k-groups 15.1 / 0.0144
# (0.96x); 32x32 in 2 13.0 / 0.0122 (1.07x); 16x64 in 2 11.9 / 0.0121 (1.07x, the inner
# product 1.29x)
_NV_THIN_M_KSPLIT = NvTile(16, 64, 16, 4, 4, ksplit=2)
_NV_THIN_MAX_K = 1024
# batched GEMMs (a weight gradient's k slices) whose entries have 128 rows and columns or
# more and a long k: their blocks are many, so the block kernels take them rather than the
# thin tiles or the loopy family. H200, ResNet-50 1x1 backward weights at mb 32 (min ms,
# 2 rounds, same call): res3a_branch2c 0.296-0.299 -> 0.173-0.176 (0.75x -> 1.28x cuDNN),
# v1.5 res3a_branch2a 0.617-0.620 -> 0.396-0.397, res3a_branch2a 0.191 -> 0.156-0.171,
# res3b_branch2a 0.228-0.243 -> 0.210-0.211; the other layers unchanged. Batched entries
# with a 64-wide side and such a k take the thin tiles whatever their long side (res2a's
# 64-channel slices: res2a_branch1 0.353 -> 0.249 ms, 0.78x -> 1.10x; res2b_branch2a 0.409
# -> 0.325, 1.23x; Winograd res2a_branch2b 0.57 -> 0.40; conv1 0.94 -> 0.85). Both only
# where the batch gives half the compute units a block (Winograd res3a's 64 products of
# 128 x 128: 128 blocks): a backward data's two slices at mb 1
# (res4a_branch2c, 196 x 256 x 512 by 2: 16 blocks) ran 0.061-0.069 -> 0.066-0.080 ms on
# the block kernels and keep the loopy family's small blocks
_NV_BATCH_MIN_DIM = 128
_NV_BATCH_MIN_K = 512
# Batched GEMMs whose entries have both sides >= 128, or a 64-wide side and a short k (the
# Winograd products of forward and backward data: k = channels), then take the 128x64 blocks
# instead of the 64x128, 128x128 or thin ones the shape rules above pick. H200, ResNet-50 at
# mb 32, min ms, the rules' tile -> 128x64 (one round, same call): backward weights
# res3a_branch1 0.354 -> 0.258, res4a_branch1 0.317 -> 0.238, res5a_branch1 0.294 -> 0.190,
# v1.5 res4a_branch2a 0.375 -> 0.275, v1.5 res5a_branch2a 0.345 -> 0.247, Winograd res5a
# 0.210 -> 0.174; Winograd forward res2a 0.263 -> 0.225, res3a 0.200 -> 0.174, res4a 0.196 ->
# 0.144, res5a 0.201 -> 0.158 (backward data alike); at mb 1 the v1.5 backward weights 10-15%
# faster, res3a_branch2a 0.055 -> 0.060. Products of 512^3 x 16 took 163 us in 128x128
# blocks, 122 in 128x64 (Winograd res5a). A 64-wide side with a long k keeps the thin tiles:
# res2a_branch1 / 2a / 2c backward weights lost 12-15% on 128x64 blocks (0.234 -> 0.269).
# Entries of n = 64 with m >= 128 (backward weights' [IC*K, OC] with 64 output channels)
# take them whatever k: the n side fills the block (2026-11-29, min ms, thin -> 128x64):
# conv1 (147 x 64 x 512, 196 entries) 0.830 -> 0.724, res2b_branch2a (256 x 64) 0.311 ->
# 0.295, res2a_branch2b through im2col (576 x 64) 0.654 -> 0.583; with m = 64 they lose
# (res2a_branch1, 64 x 256: 0.249 -> 0.269; res2a_branch2a, 64 x 64: 0.134 -> 0.143), and
# so do entries too few to give every compute unit a block (conv1 at mb 1, 16 slices of
# 147 x 64 x 784: 0.074 -> 0.093)


# Batched entries (backward weights' k slices, long k) 64 rows by 256 or more, or 1024 to 3071
# rows by 128 or 256 and at least 8 times as tall as wide, take 64x64 blocks of 8x4 where
# those give every unit one: more blocks than 128x64 ones, each half as tall. H200,
# ResNet-50 backward weights at mb 32 (min ms, the rules' tile -> 64x64, same card; forced,
# then the rule in the whole list): res2a_branch1 (64 x 256 x 784, 128 slices) 0.242 ->
# 0.206, 0.234 -> 0.207; res2a_branch2c 0.238 -> 0.204, 0.234 -> 0.207; v1.5 res3a_branch2b
# (1152 x 128 x 784, 16) 0.441 -> 0.416, 0.436 -> 0.419; v1.5 res4a_branch2b (2304 x 256)
# 0.361-0.367 -> 0.339, 0.370 -> 0.342. Others lost on them: 64 x 64 entries
# (res2a_branch2a 0.131 -> 0.141; Winograd res2a 0.384 -> 0.415), 128 x 128 (Winograd res3a
# 0.198 -> 0.234), 1024 x 256 (res4b_branch2a 0.159 -> 0.173); 4608 x 512 (v1.5
# res5a_branch2b) stayed 0.287. With 4x4 per work-item (256 work-items) the v1.5 layers lost
# 5-35%
_NV_SQUARE = NvTile(64, 64, 16, 8, 4)
_SQUARE_MIN_M = 1024


# TF32 tensor-core tiles (mma.sync m16n8k8 over 16-deep slices, fragments read as scalars, a
# plain A kept m-major in shared memory), measured on the H100 (2026-11, us; the SIMT kernel /
# cuBLAS TF32 in brackets): 64x128 blocks of 32x32 warp tiles (1024^3: 38 [100 / 18];
# 1280x2048x512: 46 [96 / 23]; 6272x128x1152: 42 [123 / 18]); once 128x128 blocks of 64x64
# warp tiles (four warps) give two per SM they win (4096^3: 1013 against 1405 [2950 / 343]);
# where 64x128 blocks would leave half the SMs idle, 64x64 ones of 32x32 warp tiles
# (1568x256x2304: 58 against 70; 392x512x4608: 105 against 134; 3136x64x576: 21 against 23).
# 32-deep slices gain 5-12% on long k but need 53 KB of local memory, more than the 48 KB the
# driver reports. With a short k (64) the SIMT kernel stays ahead (25088x256x64: 28 against
# 33): k below 128 keeps it.
_TC_BIG = NvTile(128, 128, 16, 8, 8, mma="tf32", wm=64, wn=64)
_TC_MID = NvTile(64, 128, 16, 8, 8, mma="tf32", wm=32, wn=32)
_TC_SMALL = NvTile(64, 64, 16, 8, 8, mma="tf32", wm=32, wn=32)
_TC_MIN_K = 128
# tf32 tiles that copy global -> shared with cp.async (``NvTile.stages``: slices in flight,
# no registers in between), where C has too few blocks for two 128x128 per SM. H200,
# 2026-11-29, kernel us, register-staged -> cp.async (cuBLAS TF32): 1568x256x2304 64x64
# 81.6 -> 43.9 (38.3); 6272x128x1152 64x128 41.8 -> 64x64 39.9 (31.6); 1024^3 64x128 38.1 ->
# 64x64 36.2 (29.3); 1280x2048x512 64x128 46.0 -> 64x64 45.7; 25088x64x576 64x128 48.8 ->
# 128x64 of three 16-deep stages 41.6 (50.0). The big blocks keep their registers: 4096^3
# 1025 against 1296 (four 8-deep stages) and 1120 (two 16-deep); 25088x256x576 101 against
# 89 (128x64 async) was not taken on one run. ResNet-50 at mb 32 with tf32 (min ms, before
# -> 64x64 async): tall products of 128 columns lost (25088x128x256 0.064 -> 0.074,
# 25088x128x512 0.070 -> 0.076) and keep the 64x128 blocks; 1568x512x1024 0.075 -> 0.055,
# 1568x2048x1024 0.135 -> 0.125. Outputs are the register-staged kernel's bits (the same
# rounding and mma order)
_TC_SMALL_ASYNC = NvTile(64, 64, 16, 8, 8, mma="tf32", wm=32, wn=32, stages=4)
_TC_NARROW_ASYNC = NvTile(128, 64, 16, 8, 8, mma="tf32", wm=64, wn=32, stages=3)
# bf16/f16 on the big blocks with a plain A (rows along k): tiles packed in shared memory as
# the mma reads them, 32-deep slices (H200, 2026-11, ms: 4096^3 0.78 against 0.99 unpacked
# with 16-deep slices). Elsewhere the unpacked kernel stayed ahead (its fragments convert f32
# pairs per read; packing a transposed A costs 16-bit stores: 4096^3 with A transposed 1.01
# against 0.89; the 64-wide blocks 10-20% slower packed)
_PACKED_KINDS = ("bf16", "f16")
# thin GEMMs that give fewer 64x128 blocks than half the SMs (an RNN's per-step products:
# m = the batch) keep the SIMT thin tiles or the loopy family's split k (H100 LSTM 512
# training with every GEMM on tensor cores: 4.8 -> 6.7 ms; 64x2048x512 alone: 22 us against
# 15.4); tall ones (a convolution's 25088x64x576) have blocks enough
_TC_MIN_SIDE = 128


def tensor_cores(info) -> bool:
    """TF32 mma.sync: inline PTX and compute capability 8.0 or later."""
    arch = str(getattr(info, "arch", ""))
    return bool(info.inline_ptx) and arch.startswith("sm_") and arch[3:].isdigit() \
        and int(arch[3:]) >= 80


def nv_tile(info, prob: GemmProblem, math: str = "strict") -> NvTile | None:
    """The hand-written kernel's blocking for ``prob`` on the device, or None to keep the
    loopy family (other devices, small or thin-with-long-k GEMMs, shapes it does not cover).
    ``math="tf32"``, ``"bf16"`` or ``"f16"`` (the user's fpmath mode allows it) picks a
    tensor-core tile of that kind where the device has them and the shape suits one."""
    t = _nv_tile(info, prob, math)
    if t is None or t.mma:
        return t
    if _batched_square(prob, info) and tile_fits(info, prob, _NV_SQUARE):
        return _NV_SQUARE
    if prob.batch > 1 and t is not _NV_MID and not (t is _NV_WIDE and _tall(prob)) \
            and _batched_mid(prob, info) and tile_fits(info, prob, _NV_MID):
        return _NV_MID
    return t


def tile_fits(info, prob: GemmProblem, t: NvTile) -> bool:
    """Whether the kernel covers ``prob`` with ``t`` within the device's limits."""
    return supports(prob, t) and t.threads <= info.max_work_group_size \
        and smem_bytes(t) <= info.local_mem_bytes


def _batched_square(prob: GemmProblem, info) -> bool:
    """Whether a batched GEMM takes the 64x64 blocks (measured next to ``_NV_SQUARE``)."""
    if prob.batch <= 1 or prob.k < _NV_BATCH_MIN_K:
        return False
    wide = prob.m == 64 and prob.n >= 256
    tall = _SQUARE_MIN_M <= prob.m < _TALL_MIN_M and prob.n in (128, 256) \
        and prob.m >= 8 * prob.n
    blocks = -(-prob.m // _NV_SQUARE.bm) * -(-prob.n // _NV_SQUARE.bn) * prob.batch
    return (wide or tall) and blocks >= max(1, info.compute_units)


def _batched_mid(prob: GemmProblem, info) -> bool:
    """Whether a batched GEMM on the SIMT kernel takes the 128x64 blocks (measured next to
    ``_NV_BATCH_MIN_K``)."""
    short = min(prob.m, prob.n)
    return short >= 128 or (short >= 64 and prob.k < _NV_BATCH_MIN_K) \
        or (prob.n == 64 and prob.m >= 128
            and -(-prob.m // _NV_MID.bm) * prob.batch >= max(1, info.compute_units))


# Tall GEMMs (one matrix, thousands of rows) whose n is one block's width: a convolution's
# [N*P, OC] rows with 64 or 128 output channels. n = 128: the 64x128 blocks where they give
# every compute unit one, else the thin tiles whatever k (the loopy family's split k ran
# slower there); n = 64: the 128x64 blocks from two per unit. H200, kernel us, thin tiles /
# 128x64 / 64x128 (loopy): 25088x128x256 62.5 / 49.1 / 42.3; 25088x128x512 121 / 91.3 /
# 75.8; 12544x128x576 71.1 / 70.8 / 60.6; 12544x128x1152 139.7 / 140.2 / 113.2 (171.6);
# 25088x128x1152 258.6 / 193.3 / 159.6 (246.3); 6272x128x2304 (98 blocks of 64x128) 138.6 /
# 195.7 / 181.2 (201.9); 3136x128x1152 48.2 / 41.0 (k shared) / 48.1 (89.2);
# 100352x64x64 34.7 / 30.0; 100352x64x147 90.7 / 66.4; 100352x64x256 118.3 / 92.5;
# 12544x64x576 (98 blocks of 128x64) 38.4 / 40.7. From 3072 rows (the fewest measured: 3136).
# Batched entries alike where the 64x128 blocks are enough: Winograd res3a's 16 products
# of 3136 x 128 x 128 at mb 32 (forward / backward data, min ms): 128x64 0.175-0.187 /
# 0.175-0.177, 64x128 0.166 / 0.164, thin 0.208 / 0.201, 128x128 0.238 / 0.226
_TALL_MIN_M = 3072


def _tall(prob: GemmProblem) -> bool:
    """Whether ``prob`` (each entry of a batched one) is tall with n one block's width."""
    return prob.m >= _TALL_MIN_M and prob.n in (64, 128)


def _tall_tile(prob: GemmProblem, units: int, blocks, fits) -> NvTile | None:
    """The blocking of a tall GEMM whose n is 64 or 128 (see ``_TALL_MIN_M``), or None to
    leave it to the other rules."""
    if not _tall(prob):
        return None
    if prob.n == 128:
        if blocks(_NV_WIDE) >= units and not (prob.trans_a and not prob.trans_b) \
                and fits(_NV_WIDE):
            return _NV_WIDE
        if prob.batch > 1:  # measured on batched entries with blocks enough only
            return None
        return _NV_THIN_N if fits(_NV_THIN_N) and prob.k % _NV_THIN_N.bk == 0 else None
    if blocks(_NV_MID) >= 2 * units and fits(_NV_MID):
        return _NV_MID
    return None


def _nv_tile(info, prob: GemmProblem, math: str) -> NvTile | None:
    if info is None or not info.is_gpu or info.vendor_family != "nvidia":
        return None
    units = max(1, info.compute_units)

    def blocks(t):
        return -(-prob.m // t.bm) * -(-prob.n // t.bn) * prob.batch

    if math in MMA_KINDS and tensor_cores(info) and prob.k >= _TC_MIN_K \
            and min(prob.m, prob.n) >= 32 and (min(prob.m, prob.n) >= _TC_MIN_SIDE
                                               or blocks(_TC_MID) >= 0.5 * units):
        if blocks(_TC_BIG) >= 1.9 * units:
            order = (_TC_BIG, _TC_MID)
        elif blocks(_TC_MID) >= 0.5 * units:
            order = (_TC_MID,) if _tall(prob) else (_TC_SMALL_ASYNC, _TC_MID)
        else:
            order = (_TC_SMALL_ASYNC, _TC_SMALL, _TC_MID)
        if prob.n <= 64:  # (wider blocks leave half their columns idle)
            order = (_TC_NARROW_ASYNC,) + order
        for t in order:
            if t.stages and math != "tf32":  # (cp.async tiles: tf32 only)
                continue
            t = replace(t, mma=math)  # the same blocking for every kind (16-deep slices)
            if t is not None and t.bm == _TC_BIG.bm and t.bn == _TC_BIG.bn \
                    and math in _PACKED_KINDS and not prob.trans_a and prob.k % 32 == 0:
                t = replace(t, bk=32, packed=True)
            if tile_fits(info, prob, t):
                return t

    def fits(t):
        return tile_fits(info, prob, t)

    tall = _tall_tile(prob, units, blocks, fits)
    if tall is not None:
        return tall
    batched_blocks = prob.batch > 1 and min(prob.m, prob.n) >= _NV_BATCH_MIN_DIM \
        and prob.k >= _NV_BATCH_MIN_K and blocks(_NV_WIDE) >= 0.5 * units
    if (prob.m < _NV_MIN_DIM or prob.n < _NV_MIN_DIM) and not batched_blocks:
        short, long_ = sorted((prob.m, prob.n))
        many = prob.batch > 1 and short >= 64 and prob.k >= _NV_BATCH_MIN_K \
            and blocks(_NV_THIN_M if prob.m <= prob.n else _NV_THIN_N) >= 0.5 * units
        if short < _NV_THIN_MIN[0] or (long_ < _NV_THIN_MIN[1] and not many) \
                or prob.k > _NV_THIN_MAX_K:
            return None
        t = _NV_THIN_M if prob.m <= prob.n else _NV_THIN_N
        if t is _NV_THIN_M and blocks(t) < units and fits(_NV_THIN_M_KSPLIT):
            return _NV_THIN_M_KSPLIT
        # whole slices only: a thin GEMM whose k is not a multiple of 16 keeps the loopy
        # family, which shares k among work-groups where blocks are few (gemm_slices: the
        # classifier's 32 x 2048 x 1000 in 5 shares of 8-deep slices)
        return t if fits(t) and prob.k % t.bk == 0 else None
    order = [_NV_MID]
    if blocks(_NV_WIDE) >= 0.9 * units and not (prob.trans_a and not prob.trans_b):
        order.insert(0, _NV_WIDE)
    if blocks(_NV_BIG) >= 1.9 * units:
        order.insert(0, _NV_BIG)
    order += [t for t in (_NV_BIG, _NV_WIDE) if t not in order]
    # tiles whose slices divide k first (k = 8 x odd: the 8-deep blocks, as measured before
    # partial slices existed); a partial last slice otherwise
    order.sort(key=lambda t: prob.k % t.bk != 0)
    for t in order:
        if fits(t):
            return t
    return None
