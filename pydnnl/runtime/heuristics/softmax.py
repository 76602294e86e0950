"""Device rules of the softmax and reduction families: which kernel shape, how many
work-items per work-group, how many chunks a long reduction is cut into."""
from __future__ import annotations

# The row kernels (one work-group per softmax row or reduction output) pay a local-memory
# tree and barriers per row; they win where the reduced values are contiguous and there are
# enough of them per row to keep a work-group's lanes busy. Shorter rows, and rows whose
# values lie apart in memory (the axis is an outer dim), go to the strided kernels, one
# work-item per row with neighbouring rows adjacent in memory.
ROW_MIN = 32


def _pow2_at_most(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def use_row_kernel(info, length: int, contiguous: bool) -> bool:
    """Whether rows of ``length`` values (``contiguous``: stride 1 in memory) take the
    work-group-per-row kernel."""
    return contiguous and length >= ROW_MIN


def row_wg(info, length: int) -> int:
    """Work-items per row: GPUs up to 256 (several warps in flight per row), CPUs up to 16
    (Intel's runtime runs a work-group on one thread, vectorized across work-items); never
    more than the row has values, rounded down to a power of two.

    Measured on Intel's CPU runtime (2-core AMD EPYC, shared and noisy): softmax over
    16384x1024 (axis 1) 12.6 GB/s with 16 work-items per row, 11.3 with 64, 6.3 with 256;
    sum 64x64x64x64 -> 64x64x1x1 23 GB/s with 16, 18 with 64."""
    cap = 256 if info.is_gpu else 16
    cap = min(cap, info.max_work_group_size)
    return max(1, _pow2_at_most(min(cap, max(1, length))))


# GPU softmax rows want about 8 values per work-item: fewer work-items per row means fewer
# tree levels and barriers and more rows in flight. H100 through NVIDIA's OpenCL (2026-11,
# forward, GB/s read plus written, copy 2700-2900): rows of 512: 2629 with 64 work-items,
# 2444 with 128, 1291 with 256; rows of 1024: 1951 / 2428 / 2162 with 64 / 128 / 256; rows of
# 4096: 1633 / 2212 / 2239 with 128 / 256 / 512; rows of 1000 (256 of them) 10-12 us whatever
# the size.
SOFTMAX_GPU_VALUES_PER_ITEM = 8


SOFTMAX_CACHE_MAX = 16


def softmax_row_cache(info, length: int, wg: int) -> int:
    """Values of a row each work-item of the forward row kernel keeps in registers (0: none;
    the online kernel then reads the row twice). GPUs: ``ceil(length / wg)`` up to
    SOFTMAX_CACHE_MAX, so src is read from memory once (the online kernel's second read of a
    row missed the caches: 0.70-0.75 of the copy's rate on the H200) and a row's loads are
    all in flight at once (short launch-bound rows). CPUs: none (their vector-row kernel)."""
    n = -(-max(1, length) // max(1, wg))
    return n if info.is_gpu and n <= SOFTMAX_CACHE_MAX else 0


def softmax_row_wg(info, length: int) -> int:
    """Work-items per row of the softmax row kernel: :func:`row_wg` on CPUs; on GPUs a power
    of two near ``length / 8``, from 32 (a warp) to 256."""
    if not info.is_gpu:
        return row_wg(info, length)
    want = max(32, length // SOFTMAX_GPU_VALUES_PER_ITEM)
    return max(1, _pow2_at_most(min(256, info.max_work_group_size, want)))


def softmax_vrow_vec(info) -> int:
    """Values per vector of the softmax vector-row kernel (one work-item per row walking it in
    ``floatV``), 0 where the row kernel's work-group per row is kept (GPUs). CPUs: 16 on
    Intel's runtime (one AVX-512 register), 8 on others (PoCL builds no ``float16`` code).
    Measured on the 2-core AVX-512 Xeon (Intel's runtime, kernel event times, same process,
    3 rounds): 256x1000 forward 0.079-0.087 ms with a 16-lane work-group per row (sub-group
    reductions; 0.075-0.080 with 8 or 32 rows per work-group), 0.048-0.051 ms with one
    work-item per row in ``float16`` (0.034 without any ``exp``). Intel's vectorizer runs the
    work-group's strided loops far slower than the explicit vector loop."""
    if info.is_gpu:
        return 0
    return 16 if info.runtime == "intel" else 8


# Tried for 256x1000 before the vector-row kernel (same machine, kernel event times, 3 rounds)
# and not taken: 8 or 32 rows per 16-lane work-group 0.075-0.079 ms (one row: 0.079-0.087);
# native_exp2 0.078-0.079 (lower accuracy for 5%); a degree-6 polynomial exp2 0.100-0.104;
# work_group_reduce (no sub-group attribute) 0.081-0.085. The rows' cost was the work-item
# vectorizer's strided loops (0.065 ms with no exp at all), not exp.

# Several rows per work-item (as the layer normalization forward's ``ln_fwd_vec_rows``) did
# not pay for 256x1000 (rows of 4 KB): wall 0.058-0.060 ms with one row, 0.055-0.058 with 2,
# 4 or 8 rows (kernel 0.049-0.054 against 0.050-0.053): noise.

# work-items per work-group of the vector-row kernel: one (each is a whole SIMD row already;
# Intel's runtime does not vectorize across work-items of explicit-vector code)
SOFTMAX_VROW_WG = 1


def row_subgroup(info, wg: int) -> bool:
    """Whether a row's work-group (one sub-group of ``wg`` lanes) combines its partial results
    with sub-group reductions instead of a local-memory tree with barriers: CPU runtimes with
    Intel's sub-group extensions, where a work-group of ``simd_width`` work-items is one SIMD
    vector. Measured on Intel's CPU runtime (2-core EPYC, loaded; same process, minimum of 3):
    softmax 16384x1024 forward 27.2 ms with the tree, 21.6 ms with sub-group reductions."""
    return (not info.is_gpu and wg == info.simd_width
            and "cl_intel_required_subgroup_size" in info.extensions)


def softmax_online(info) -> bool:
    """Whether the forward row kernel keeps a running maximum and rescaled sum (one read, then
    one normalizing pass: 2 reads + 1 write, 2 ``exp`` per element) instead of a max pass, an
    exponentials pass into dst and a scaling pass (1 ``exp`` per element). GPUs: memory is the
    bound, ``exp`` is cheap. CPUs: ``exp`` is the bound; measured on Intel's CPU runtime
    (16384x1024, 16 work-items per row): 3 passes 37 ms, online 54 ms, 3 passes without
    any exp 20 ms, a row copy 14 ms."""
    return bool(info.is_gpu)


def softmax_runtime_axis(info, problem) -> bool:
    """Whether the softmax kernel takes its axis length as an argument (the row loops' trip
    count and the strides that grow with it: one program for every length of the class)
    rather than baked: on every device, no baked specialization (none measured faster).
    Measured on the 2-core AVX-512 Xeon (Intel's runtime, shared with another job; baked and
    run-time primitives in one process, alternated over 10-20 rounds, minimum of 6 runs per
    round; run-time / baked, ratio of minimum times and median per-round ratio): row kernel
    forward 256x1000 axis 1 1.02 / 1.00, log 0.89 / 0.93, 16384x64 0.99 / 0.98, 4096x40 1.00 /
    1.00, 4x12x512x512 axis 3 0.93 / 1.11 (per-round range 0.77-1.46: noise), its backward 0.99
    / 0.99, log backward 16384x64 0.97 / 0.98; strided kernel (axis 1 of nchw) forward
    256x5x32x32 0.96 / 0.94, backward 1.00 / 0.99, 32x19x64x64 forward 1.00 / 1.01, backward
    0.99 / 0.99. The row loops' trip count is not what bounds them (``exp`` and memory are),
    and an unrolled 5-long strided loop gained nothing measurable. NVIDIA H200 (benchdnn,
    baked -> run-time, two rounds, min ms): 16x12x512x512 axis 3 0.1437 -> 0.1435-0.1452,
    16384x1024 forward 0.0487-0.0489 -> 0.0486-0.0496, backward 0.0563 -> 0.0557-0.0559,
    256x1000 (launch-bound) 0.0147-0.0148 -> 0.0131-0.0189."""
    return True


def softmax_strided_vecs(info) -> tuple[int, ...]:
    """Adjacent positions per work-item of the strided softmax kernel, best first (the first
    the layout allows is taken). CPUs: 16 (a cache line of f32 per work-item and axis step,
    vector loads); measured on Intel's CPU runtime, 256x1024x64 along axis 1, same process:
    1 position 124 ms (64 per group), 2: 65, 4: 34-48, 8: 27, 16: 24. GPUs: 1 (neighbouring
    work-items already read neighbouring addresses). PoCL (its kernel compiler targets no
    AVX-512 ABI) fails to build ``float16`` code: 8 at most there."""
    if info.is_gpu:
        return (1,)
    return (16, 8, 4, 2) if info.runtime == "intel" else (8, 4, 2)


def strided_wg(info, vec: int = 1) -> int:
    """Work-items per work-group of the strided reduction kernel (one output, or ``vec``
    adjacent outputs, each). Measured on Intel's CPU runtime: sum 64x64x64x64 -> 1x64x64x64
    11 GB/s with 64 or 256, 5.7 with 16 (one output each)."""
    if info.is_gpu or vec == 1:
        return min(128 if info.is_gpu else 64, info.max_work_group_size)
    return min(REDUCTION_VEC_WG, info.max_work_group_size)


REDUCTION_VEC_WG = 16


def reduction_vecs(info) -> tuple[int, ...]:
    """Adjacent outputs per work-item of the strided reduction kernel, best first (as
    :func:`softmax_strided_vecs`). Measured on Intel's CPU runtime, sum 64x64x64x64 ->
    1x64x64x64 (64 MiB), same process, minimum of 2: 1 output per work-item (64 per group)
    3.66 ms, 4 (16 per group) 3.54, 8: 2.58, 16 (4 per group) 2.28, 16 (16 per group) 2.31,
    16 (64 per group) 2.18."""
    return softmax_strided_vecs(info)


# Measured on Intel's CPU runtime, sums of rows of R contiguous values (same process, min of
# 2): R=49 (mean 32x2048x7x7 -> 32x2048x1x1) work-group per output 1.79 ms, work-item per
# output 0.75 ms; R=128 (65536 rows) 5.7 vs 14.0 ms; R=512 (16384 rows) 1.9 vs 10.4 ms.
REDUCTION_ROW_MIN_CPU = 64


def use_reduction_row_kernel(info, length: int, outputs: int, contiguous: bool) -> bool:
    """Whether each output of a reduction over ``length`` contiguous values takes a
    work-group (else one work-item walks them): on CPUs from 64 values (see above)."""
    if not info.is_gpu:
        return contiguous and length >= REDUCTION_ROW_MIN_CPU
    return use_row_kernel(info, length, contiguous)


def softmax_strided_wg(info, vec: int = 1) -> int:
    """Work-items per work-group of the strided softmax kernel (one row, or ``vec`` adjacent
    rows, each). Measured on Intel's CPU runtime: 256x1024x64 along axis 1, 6.9 GB/s with 256,
    3.5 with 16 or 64 (one row each); with 16 rows each 4 per group 24 ms, 8 per group 31 ms."""
    if info.is_gpu:
        return min(128, info.max_work_group_size)
    return min(256 if vec == 1 else 4, info.max_work_group_size)


# GPUs: a reduction is split only below SPLIT_GROUPS_GPU work-groups (or outputs) per compute
# unit. H200 (benchdnn min ms, same process, 8 -> 4 -> 2): sum 16x64x128x128 -> 16x64x1x1
# (1024 rows of 16384, 256 lanes each) 0.0247-0.0248 split in 2 -> 0.0215 whole -> 0.0211
# whole (0.89x -> 1.03x PyTorch, 0.74 -> 0.84 of the copy's rate: the second launch and the
# partial sums' round trip cost more than the idle units), mean to 1x64x1x1 0.0298-0.0306 in
# 17 -> 0.0289 in 9 -> 0.0370 in 5 chunks.
SPLIT_GROUPS_GPU = 4


def reduction_splits(info, outputs: int, length: int, wg: int) -> int:
    """Chunks each reduction is cut into, so that few long reductions still fill the device:
    enough work-groups (or work-items) for every compute unit several times over, each chunk
    at least 16 values per work-item. Measured on Intel's CPU runtime: a sum of 64 MiB to one
    value ran at 21 GB/s cut into 4, 64 or 256 chunks (the copy kernel: 17 to 28); more
    chunks balance better on a loaded machine."""
    want = max(1, (info.compute_units or 1) * (SPLIT_GROUPS_GPU if info.is_gpu else 16))
    if outputs >= want:
        return 1
    by_len = max(1, length // (16 * wg))
    return max(1, min(-(-want // outputs), by_len, 1024))
