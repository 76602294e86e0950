"""Device rules of the reduction family's contiguous-row kernels (``pydnnl/kernels/
reduction.py``): the CPU's work-item-per-row kernel with vector loads (``vrow``) and the GPU's
row kernel with several rows per work-group. The strided kernel's rules (reductions over outer
dims) stay with softmax's in ``heuristics/softmax.py``.

Reductions whose innermost reduced dim is contiguous in memory (``mean 32x2048x7x7 ->
32x2048x1x1``: 65536 rows of 49 values; ``sum 16x512x768 -> 16x512x1``: 8192 rows of 768).

CPUs: one work-item per output reads its row with vector loads (``vloadN``), N lanes
accumulating apart, one horizontal combine at the end. Measured on Intel's CPU runtime (2-core
EPYC, same process, minimum of 20): rows of 49, 65536 rows: a work-item per row with scalar
loads 0.77 ms (gathers across the vectorized work-items), with float8 loads 0.083 ms, float16
0.090 ms; rows of 768, 8192 rows: a 16-lane work-group per row with a tree 0.54 ms, one
work-item with float16 loads 0.196 ms; rows of 16384, 1024 rows: 1.41 ms (work-group per
row) vs 1.24 ms (float8). Work-groups of 64 such work-items: 0.083 ms against 0.099 with 16.

GPUs: ``lanes`` work-items per row (a power of two, about 4 values each), ``256 / lanes`` rows
per work-group, so that a warp reads a few whole neighbouring rows at once (coalesced) and a
short row no longer leaves most of a 256-wide group idle (H100: mean over rows of 49 ran at
0.11 of copy with one row per group). Partial results combine in a local-memory tree within
each row's lanes.
"""
from __future__ import annotations

GPU_GROUP = 256
VROW_WG = 64
VALUES_PER_LANE = 4


def _pow2_at_most(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def use_vrow(info) -> bool:
    """Whether contiguous rows take the CPU kernel (a work-item per output, vector loads)."""
    return not info.is_gpu


def vrow_vec(info) -> int:
    """Values per vector load of the ``vrow`` kernel: 8 (float8 measured a little faster
    than float16 on rows of 49 and 768 on Intel's runtime, see above; PoCL builds no float16
    code)."""
    return 8


def vrow_launch(info, outputs: int, length: int, runs: int) -> tuple[int, int]:
    """(work-group size, chunks per output) of the ``vrow`` kernel over outputs of ``length``
    values in ``runs`` contiguous runs: chunks (whole runs where there are several, else
    pieces of the one run) so that every compute unit gets several groups' worth of
    work-items, a chunk at least 4096 values; groups of up to 64 work-items shrunk until there
    are 4 groups per compute unit."""
    cu = max(1, info.compute_units or 1)
    want = cu * 4 * 16                       # work-items: 4 groups of 16 per compute unit
    splits = 1
    if outputs < want:
        splits = max(1, min(-(-want // outputs), length // 4096, 1024))
        if runs > 1:
            splits = min(splits, runs)
    items = outputs * splits
    wg = VROW_WG
    while wg > 1 and items < wg * 4 * cu:
        wg //= 2
    return min(wg, int(info.max_work_group_size or wg)), splits


def row_lanes(info, length: int) -> int:
    """Work-items per row of the GPU row kernel: a power of two near ``length / 4``, at most
    the work-group (256)."""
    cap = min(GPU_GROUP, int(info.max_work_group_size or GPU_GROUP))
    return max(1, min(cap, _pow2_at_most(max(1, length // VALUES_PER_LANE))))


def rows_per_group(info, lanes: int) -> int:
    """Rows per work-group of the GPU row kernel: the 256-item group filled with rows."""
    cap = min(GPU_GROUP, int(info.max_work_group_size or GPU_GROUP))
    return max(1, cap // lanes)


# Column sums (bias gradients: the sum over time steps x batch rows of each gate gradient
# column) on GPUs take COLSUM_GPU_ROW_LANES work-items per column, which add interleaved rows
# and meet in local memory; one work-item per column walked 3200 rows alone and left the
# device nearly idle (H200, LSTM 512 training's 3200 x 2048 bias gradient: 0.375 ms, 70 GB/s).
# CPUs keep one work-item per column (its rows stream through one core's cache).
COLSUM_GPU_ROW_LANES = 16


def colsum_row_lanes(info) -> int:
    """Work-items per column of a column sum on this device."""
    return COLSUM_GPU_ROW_LANES if info.is_gpu else 1


# Transposes on GPUs go through local-memory tiles of TRANSPOSE_GPU_TILE (reads and writes both
# consecutive): H200, the recurrent weights of the DeepSpeech2-like training (1760 x 7040)
# took 0.47 ms with one work-item per element (210 GB/s, the writes strided), 0.033 ms in 32 x
# 32 tiles (3 TB/s counting the read and the write). CPUs keep one
# work-item per element (their compilers vectorize along the consecutive reads).
TRANSPOSE_GPU_TILE = 32


def transpose_tile(info) -> int:
    """Side of the local-memory tiles of a transpose (0: none)."""
    return TRANSPOSE_GPU_TILE if info.is_gpu else 0
