"""Device rules of the normalization family: launch shapes of the batch normalization
channel reductions and elementwise pass, and of the layer normalization row kernels.

A reduction is cut into chunks so that enough work-groups run at once (a GPU wants several
per compute unit to hide memory latency; a CPU runtime runs one work-group per thread and
wants a few per core for balance) while each chunk stays long enough that the partial sums,
added by a second tiny kernel, cost nothing. The elementwise pass uses one element per
work-item in work-groups of 256, which Intel's CPU runtime vectorizes across work-items
(the eltwise family measured 53-58 GB/s that way on this 2-core host, against less for loops
of several elements per work-item).
"""
from __future__ import annotations

APPLY_WG = 256


def _pow2_at_most(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def target_groups(info) -> int:
    """Work-groups wanted in flight for a memory-bound reduction."""
    cu = max(1, info.compute_units or 1)
    return cu * (8 if info.is_gpu else 4)


def bn_reduce_params(info, C: int, R: int, c_innermost: bool) -> tuple[str, int, int]:
    """(lanes, work-group size, chunks) of the batch normalization channel reduction over
    ``R`` values per channel: lanes along the channels where they are innermost in memory
    (each work-item then walks its chunk with stride C; neighbours read neighbours), else a
    work-group per (chunk, channel) reading consecutive values."""
    maxwg = max(1, info.max_work_group_size)
    if c_innermost and not info.is_gpu:
        # CPU: a work-group spans the channels of a row (up to 256), and its vectors walk the
        # same chunk of rows one after the other, so a chunk of about 64 KiB is read from
        # memory once and from cache by the group's other vectors. Measured (nhwc 32x64x90x90
        # training forward, 2-core EPYC, AVX-512, Intel's runtime): one 16-lane vector per
        # group and 2 chunks per core (each vector streaming a quarter of every row over
        # 40 MiB) 15.6 ms, 0.19-0.25 of copy; 64 lanes, 256-row chunks, 4 sums per lane
        # over consecutive rows: see docs/normalization.md.
        wg = min(_pow2_at_most(maxwg), 256, _pow2_at_least(C))
        chunk = max(16, (64 * 1024) // (4 * max(wg, C)))
        groups = max(1, min(4096, -(-R // chunk)))
        return "c", wg, groups
    if c_innermost:
        wg = min(_pow2_at_most(maxwg), 64 if info.is_gpu else 16, _pow2_at_least(C))
        cgroups = -(-C // wg)
        want = max(1, -(-target_groups(info) // cgroups))
        groups = max(1, min(want, R // 32 or 1))
        return "c", wg, groups
    # CPU: one SIMD vector of lanes per work-group. Intel's runtime runs a work-group's
    # vectors one after the other, so wider groups walk each row several times with gaps;
    # measured (nchw 32x64x90x90 statistics, 2-core EPYC, AVX-512): 64 lanes 50 ms, 16
    # lanes 20 ms, 16 lanes with 4 independent sums per lane 9.5 ms (a plain grid-stride
    # sum of the same bytes 5.6 ms).
    lanes = max(1, info.simd_width or 8) if not info.is_gpu else 256
    wg = min(_pow2_at_most(maxwg), lanes, _pow2_at_least(max(R, 1)))
    want = max(1, -(-target_groups(info) // C))
    groups = max(1, min(want, R // (wg * 8) or 1))
    return "r", wg, groups


def bn_reduce_tree(info, lanes: str) -> bool:
    """Whether the ``r``-lanes reduction sums its lanes in local memory (one partial per
    work-group) instead of writing one partial per lane: GPUs, whose finish kernel (one
    work-item per channel) would otherwise add ``groups * 256`` partials one after the other
    (thousands of dependent loads per channel for a few dozen channels). CPUs keep one
    partial per lane (a group is one SIMD vector; no barrier)."""
    return info.is_gpu and lanes == "r"


def apply_wg(info) -> int:
    """Work-group size of the elementwise pass (one element per work-item)."""
    return min(APPLY_WG, _pow2_at_most(max(1, info.max_work_group_size)))


def apply_rows_per_item(info) -> int:
    """Rows (outer runs) each work-item of the plain elementwise pass covers, its loads
    independent: GPUs 4, so a work-item keeps several loads in flight and the row's index
    and channel arithmetic is paid once per element of each row rather than for a single
    element. CPUs 1 (Intel's runtime vectorizes across the work-items of a row)."""
    return 4 if info.is_gpu else 1


def small_wg(info, n: int) -> int:
    """Work-group size of a kernel with one work-item per channel."""
    return min(64, _pow2_at_most(max(1, info.max_work_group_size)), _pow2_at_least(max(n, 1)))


LN_ROW_WG_GPU = 64


def ln_row_wg(info, C: int) -> int:
    """Work-items per row of the layer normalization kernels (a power of two): GPUs the
    fewest that keep a row in registers (``ceil(C / wg) <= LN_CACHE_MAX``), at least 64 and
    at most 256; CPUs one SIMD vector (``simd_width``, 16 with AVX-512), combined with
    sub-group reductions (:func:`ln_row_subgroup`). H200, minimum times (64 / 128 / 256
    work-items per row): inference 16x512x768 0.0194 / 0.0192 / 0.0266 ms, training forward
    32x128x1024 0.0187 / 0.0263 / 0.0190, backward 16x512x768 0.0540 / 0.0542 / 0.0577
    (32: 0.0240, 0.0191, 0.0595): fewer, busier work-items per row and a shorter tree."""
    if info.is_gpu:
        want = max(LN_ROW_WG_GPU, _pow2_at_least(-(-max(C, 1) // LN_CACHE_MAX)))
        cap = min(256, want)
    else:
        cap = max(1, info.simd_width or 16)
    return max(1, min(cap, _pow2_at_most(max(1, info.max_work_group_size)),
                      _pow2_at_least(max(C, 1))))


def ln_row_subgroup(info, wg: int) -> bool:
    """Whether a layer normalization row's work-group (one sub-group) sums with sub-group
    reductions instead of a local-memory tree: CPU runtimes with Intel's sub-group
    extensions, ``wg`` equal to the SIMD width (as the softmax rows)."""
    return (not info.is_gpu and wg == info.simd_width
            and "cl_intel_required_subgroup_size" in info.extensions)


LN_CACHE_MAX = 16


def ln_row_cache(info, C: int, wg: int) -> int:
    """Values of a row each work-item of the layer normalization row kernels keeps in
    registers (0: none, the row is read twice). GPUs: ``ceil(C / wg)`` up to 16 (rows up to
    4096 at 256 work-items), so src (and diff_dst backward) is read from memory once
    instead of relying on L1/L2 for the second pass. CPUs: none, the row of one SIMD vector
    stays in the core's caches (not measured to pay there)."""
    n = -(-C // max(1, wg))
    return n if info.is_gpu and n <= LN_CACHE_MAX else 0


LN_ACCS_CPU = 4


def ln_row_accs(info, C: int, wg: int, cache: int) -> int:
    """Independent partial sums per work-item in the forward layer normalization's
    statistics passes (no ``cache``). CPUs: LN_ACCS_CPU where the row holds that many SIMD
    vectors: a work-group is one SIMD vector walking its row, and with one accumulator every
    vector add waits for the previous one (no reassociation without fast math). GPUs 1
    (many rows in flight hide the latency). Intel's CPU runtime (2-core Sapphire Rapids
    class, shared machine, 3 interleaved rounds, minimum ms, one accumulator -> 4): inference
    16x512x768 1.75-1.79 -> 1.35-1.50, training 32x128x1024 1.08-1.14 -> 0.86-0.88,
    32x512x1024 9.2-9.3 -> 7.3-7.6. The backward row kernel (its sums fused with the
    diff_scale/diff_shift partial rows) measured within noise (16x512x768 1.99-2.05 ->
    1.85-2.02, 32x512x1024 8.7-9.1 -> 9.0-9.2) and keeps one."""
    if info.is_gpu or cache or C < LN_ACCS_CPU * wg:
        return 1
    return LN_ACCS_CPU


LN_SS_ROWS_CPU = 64


def ln_ss_params(info, C: int, rows: int) -> tuple[int, int, bool]:
    """(work-group size, row chunks, column loop) of the layer normalization scale/shift
    gradient. GPUs: work-items along the columns, a few chunks of rows. CPUs: one SIMD
    vector per chunk of 64 rows walking every column block (``col_loop``): walking all rows
    per column block touches one cache line per page (no prefetch, a TLB miss per access).
    Measured on Intel's CPU runtime (32x512x1024, same process, minimum of 2): column blocks
    walking all rows 32.2 ms, in 64 chunks 18.4 ms; chunks of 16 rows walking every column
    block 12.4 ms, of 64 rows 9.1 ms, of 256 rows 10.6 ms."""
    if not info.is_gpu:
        wg = min(_pow2_at_most(max(1, info.max_work_group_size)), max(1, info.simd_width or 16),
                 _pow2_at_least(C))
        return wg, max(1, -(-rows // LN_SS_ROWS_CPU)), True
    wg = min(_pow2_at_most(max(1, info.max_work_group_size)), 64, _pow2_at_least(C))
    cgroups = -(-C // wg)
    want = max(1, -(-target_groups(info) // cgroups))
    return wg, max(1, min(want, rows // 16 or 1)), False


BN_FUSED_CACHE_MULT = 4


def bn_fused(info, C: int, channel_bytes: int, run: int) -> tuple[bool, int, bool]:
    """(use, work-group size, sub-group sums) of the one-kernel batch normalization with
    statistics (``BnFused``: a work-group per channel reads the channel for its sums, then
    again from cache to normalize it). CPUs only, where each core walks whole channels: at
    least one channel per compute unit, the channel's bytes read (src, and diff_dst
    backward) within ``BN_FUSED_CACHE_MULT`` times the cache OpenCL reports (a core's L2;
    the second read then comes from L2 or the shared L3 rather than memory), and a
    contiguous run per channel of at least one SIMD vector (``nchw``). GPUs keep the
    reduction over many work-groups (a few dozen channels would idle most of the device).
    Measured on Intel's CPU runtime (2-core EPYC, same process, 3 runs each): nchw
    16x64x128x128 training forward 14-15 ms -> 7.2-9.2 ms, backward 22-24 ms -> 15.2-15.7 ms;
    32x256x56x56 (runs of 12.5 KiB) within noise of the reduction kernels (fwd 19-22 ->
    15-22 ms, bwd 26-37 -> 28-31 ms)."""
    if info.is_gpu or run < 1:
        return False, 0, False
    cu = max(1, info.compute_units or 1)
    cache = info.global_mem_cache_bytes or (1 << 20)
    simd = max(1, info.simd_width or 16)
    wg = min(simd, _pow2_at_most(max(1, info.max_work_group_size)))
    use = C >= cu and run >= wg and channel_bytes <= BN_FUSED_CACHE_MULT * cache
    sub = wg == info.simd_width and "cl_intel_required_subgroup_size" in info.extensions
    return use, wg, sub


def ln_bwd_fused_ss(info, cache: int, wg: int = 0) -> bool:
    """Whether the layer normalization backward row kernel also sums diff_scale/diff_shift
    (``LnRows.ss_rows``: a work-group walks a chunk of rows, adding into its own partial row)
    instead of a second kernel reading src and diff_dst again. CPUs (rows of one SIMD
    vector, no register cache): 5 tensor passes become 3. Measured on Intel's CPU runtime
    (2-core EPYC, loaded machine, same process, minimum of 3 runs each): BWD_DW 32x512x1024
    49-61 ms -> 29-31 ms, 16x512x768 17-21 ms -> 8-10 ms.

    GPUs: rows kept in registers (``cache``) and work-groups of at least
    LN_FUSED_SS_GPU_MIN_WG lanes (rows over 2048 values), each lane summing its columns over
    LN_SS_ROWS_GPU rows in registers. H200, benchdnn min ms, two interleaved rounds, separate
    kernel -> fused (16 rows per group): 4x1024x4096 (256 lanes) 0.107 -> 0.085 (1.28x ->
    1.61x PyTorch); with 64 lanes it lost: 16x512x768 0.054 -> 0.066, 32x512x1024 0.112 ->
    0.127-0.129, 32x128x1024 0.039 -> 0.048 (fewer, narrower work-groups, and the
    finalization walks one partial row per group for each of fewer columns; 32 or 64 rows per
    group lost too, 4 or 8 lost more)."""
    if info.is_gpu:
        return bool(cache) and wg >= LN_FUSED_SS_GPU_MIN_WG
    return not cache


LN_FUSED_SS_GPU_MIN_WG = 256
LN_SS_ROWS_GPU = 16


def ln_ss_rows(info) -> int:
    """Rows per work-group of the backward row kernel that also sums diff_scale/diff_shift
    (see :func:`ln_bwd_fused_ss`)."""
    return LN_SS_ROWS_GPU if info.is_gpu else LN_SS_ROWS_CPU


def ln_fwd_vec(info, C: int) -> int:
    """Values per vector of the layer normalization forward with one work-item per row
    (``LnRows.vec``), 0 where the work-group per row is kept (GPUs, and rows shorter than
    one vector). CPUs: 16 on Intel's runtime (an AVX-512 register), 8 on others (PoCL
    builds no ``float16`` code). Intel's runtime vectorizes a 16-lane work-group per row
    across its work-items, and those strided loops run slower than an explicit vector loop:
    2-core AVX-512 Xeon, kernel event times, same process, 3 rounds: 32x128x1024 training
    0.82-0.83 ms (work-group, 4 sums per lane) -> 0.67-0.69 ms (one work-item, 2 vector
    sums); PyTorch 0.89-0.95 in the same runs."""
    if info.is_gpu:
        return 0
    v = 16 if info.runtime == "intel" else 8
    return v if C >= v else 0


LN_VEC_ACCS_CPU = 2


def ln_fwd_vec_accs(info, C: int, vec: int) -> int:
    """Vector partial sums per row of the vector-row forward: 2 where the row holds two
    vectors (the adds then form two dependency chains)."""
    return LN_VEC_ACCS_CPU if C >= LN_VEC_ACCS_CPU * vec else 1


LN_VEC_ROW_VALUES = 16384


def ln_fwd_vec_rows(info, C: int) -> int:
    """Consecutive rows per work-item of the vector-row forward: up to 16, about
    ``LN_VEC_ROW_VALUES`` values per work-item (fewer work-groups: Intel's runtime pays a fixed
    cost for each). Independent of the row count, so one program serves every batch. Measured
    on the 2-core AVX-512 Xeon (kernel event times, 3 rounds, loaded machine): 16x512x768
    1.19-1.20 ms with one row per work-item, 1.04-1.06 with 4, 1.01-1.03 with 16 (the
    variance pass left out: 0.99-1.03)."""
    return max(1, min(16, LN_VEC_ROW_VALUES // max(1, C)))


BN_APPLY_VEC_VALUES = 16384


def bn_apply_vec(info) -> int:
    """Values per vector of the batch normalization elementwise pass with one work-item per
    innermost run (``BnApply.vec``), 0 for the per-element form (GPUs, whose work-items
    coalesce). CPUs: 16 on Intel's runtime (an AVX-512 register), 8 on others (PoCL builds
    no ``float16`` code), as :func:`ln_fwd_vec`. The per-element form runs on a 2-D grid
    (runs along axis 0), which Intel's runtime vectorizes across work-items with a partly
    masked work-group per run (3136 values at 56x56) and the index arithmetic per group."""
    if info.is_gpu:
        return 0
    return 16 if info.runtime == "intel" else 8


BN_REDUCE_VEC_VALUES = 16384


def bn_reduce_vec(info, C: int, R: int) -> tuple[int, int, int]:
    """(vector width, vectors per work-item, chunks) of the channels-innermost statistics
    reduction with one work-item per block of channels and chunk of rows
    (``BnReduce.vec``, ``nhwc``/``nc``), ``(0, 1, 0)`` for the work-group-of-lanes form
    (GPUs; channels fewer than one vector). CPUs: vectors as :func:`bn_apply_vec`, up to 4
    per work-item (64 channels, 4 cache lines of a row, 8 accumulators), chunks of about
    BN_REDUCE_VEC_VALUES values per work-item. 2-core AVX-512 Xeon, Intel's runtime, machine
    loaded by other jobs (times about twice the quiet ones), both forms in one process,
    4 alternating rounds, min-max of the minimum ms, with the vector elementwise pass
    (:func:`bn_apply_vec`) on the new side: nhwc 32x256x56x56 training forward 19.0-19.7 ->
    13.4-13.9 (PyTorch 52-53), backward 52-77 -> 37-50 (PyTorch 181-299); kernel events,
    consecutive runs: reduction forward 10.3 -> 5.6 ms, backward 19.8 -> 8.3, the finalize
    (1568 -> 392 partial rows) 0.9 -> 0.12."""
    if info.is_gpu:
        return 0, 1, 0
    v = bn_apply_vec(info)
    if C < v:
        return 0, 1, 0
    k = max(1, min(4, C // v))
    rows = max(16, BN_REDUCE_VEC_VALUES // (v * k))
    return v, k, max(1, min(4096, -(-R // rows)))


def ln_bwd_vec(info, C: int, fused_ss: bool) -> int:
    """Values per vector of the layer normalization backward with one work-item per chunk
    of rows (``LnRows.vec`` with ``dy``), 0 for the work-group per row: as
    :func:`ln_fwd_vec` (CPUs 16 on Intel's runtime, 8 on others) where the row kernel does
    not also sum diff_scale/diff_shift (:func:`ln_bwd_fused_ss`: backward_data, no scale or
    shift, global statistics). 2-core AVX-512 Xeon, Intel's runtime, loaded machine, both
    forms in one process, 5 alternating rounds, min-max of the minimum ms: 16x512x768
    BWD_DW 4.6-6.8 -> 2.4-5.3 (a second run 1.75-4.96 -> 1.48-3.43), 32x128x1024 BWD_DW
    2.23-2.78 -> 1.90-2.01, 16x512x768 BWD_D CH 3.07-6.09 -> 2.17-4.52 (PyTorch 11-18 in
    those rounds). With the fused scale/shift sums (vector read-modify-write of the
    work-item's partial rows) it measured no better: 16x512x768 BWD_DW CH 1.87-1.97 ->
    1.82-4.53, 32x128x1024 1.37-2.24 -> 1.68-2.46, worse with chunks of 16 or 8 rows."""
    return 0 if fused_ss else ln_fwd_vec(info, C)
