"""Device rules of the RNN family, each next to the measurement behind it."""
from __future__ import annotations

from ...kernels.rnn_persistent import MAX_ITEMS

# Batches up to FUSED_MAX_N run each step's recurrent GEMM inside the cell kernel on GPUs,
# one launch per step instead of two, as long as a work-item's serial dot products (SIC
# multiply-adds per gate, G gates) stay within FUSED_MAX_MACS. Measured on an H100 (LSTM,
# T = 50): N = 1..8 at 512 channels 1.11-1.29 -> 1.10-1.16 ms; N = 1, 32 channels, T = 1000
# 24 -> 13 ms; but N = 1 at 1760 channels 4.0 -> 8.1 ms (too few work-items for 7040 MACs).
# CPUs never fuse (Intel runtime, AVX-512 Xeon, LSTM 512, N = 64, T = 50): the fused kernel
# with 2-8 batch rows per work-item took 96-218 ms against 55-60 for GEMM + cell kernel (u read
# as it lies, rows 8 KiB apart, keeps hitting the same cache sets), and a prototype reading a
# packed u panel 1.1-1.4 ms a step against about 0.7 for the tuned GEMM and the cell together,
# although every launch costs 85-150 us there.
FUSED_MAX_N = 8
FUSED_MAX_MACS = 2048


def fuse_recurrent_gemm(info, batch: int, sic: int, gates: int) -> bool:
    """Whether the cell kernels should compute their recurrent GEMM themselves."""
    return info.is_gpu and batch <= FUSED_MAX_N and sic * gates <= FUSED_MAX_MACS


# One work-group walks the whole sequence of a layer and direction (kernels/rnn_persistent.py)
# when its batch x channels items fit one work-group and one compute unit does a step faster
# than the per-step launches (LSTM FWD_I, T = 100 unless said, median ms, off -> one launch):
# - NVIDIA H200: the weights are read from L2 every step, so their size decides. 64 KiB or
#   less wins: 32 channels N 1 T 1000 13.7 -> 0.63 (cuDNN 0.46), 64 channels N 1 / 8 / 16
#   1.06 -> 0.33, 1.09 -> 0.44, 1.87 -> 0.73, GRU 64 N 8 1.99 -> 0.42; 256 KiB loses: 128
#   channels N 1 / 4 / 8 1.06 -> 2.20, 1.08 -> 1.90, 1.09 -> 1.83; 512 channels N 1 (T 50)
#   1.11 -> 4.33.
# - 2-core AVX-512 Xeon, Intel's runtime (one core runs the work-group): a step's
#   multiply-adds decide. 64 Ki or fewer win: 32 channels N 1 T 1000 16.6 -> 0.45, 64 N 1
#   1.43 -> 0.42, 128 N 1 1.67 -> 1.52; more lose: 64 N 8 1.51 -> 3.06, 128 N 4 2.05 -> 6.10,
#   256 N 1 3.00 -> 6.48.
# The weights stay in registers when a work-item's columns are at most PERSISTENT_PRIVATE_U
# floats (32 channels, 4 gates).
PERSISTENT_MAX_ITEMS = MAX_ITEMS  # what the kernel's local arrays hold
PERSISTENT_GPU_MAX_WEIGHT_BYTES = 64 << 10
PERSISTENT_CPU_MAX_MACS = 1 << 16
PERSISTENT_PRIVATE_U = 128
# Tried and not taken (H200, the tiny LSTM: 32 channels, N 1, T 1000, one warp, 0.51-0.60 ms
# of kernel time, 0.5-0.6 us a step): loading a step's gx one step ahead, and four partial sums
# per gate (a 4x shorter chain of multiply-adds): the kernel's time unchanged to 0.5% in
# both, so neither gx's latency nor the sums' chain bounds a step.


def persistent_recurrence(info, batch: int, dhc: int, gates: int) -> bool:
    """Whether one work-group runs every step of a layer's recurrence in one launch."""
    if batch * dhc > min(info.max_work_group_size, PERSISTENT_MAX_ITEMS):
        return False
    if info.is_gpu:
        return gates * dhc * dhc * 4 <= PERSISTENT_GPU_MAX_WEIGHT_BYTES
    return batch * gates * dhc * dhc <= PERSISTENT_CPU_MAX_MACS


# On NVIDIA GPUs (inline PTX for the fences), larger recurrences run as one launch of up to
# one work-group per compute unit (kernels/rnn_persistent_grid.py): each group keeps its
# channels' weights in local memory, steps meet at a grid-wide barrier (about 2 us on an
# H200). A group holds jb = ceil(channels / compute units) channels of every batch row; the
# path is taken when that fits one group (items, local memory).
GRID_MAX_ITEMS = 1024


def grid_recurrence(info, batch: int, dhc: int, local_bytes) -> int | None:
    """Channels per work-group of the grid-wide one-launch recurrence, or None where it does
    not apply; ``local_bytes(jb)`` is the local memory a group of ``jb`` channels needs."""
    if not (info.is_gpu and info.inline_ptx) or info.compute_units < 2:
        return None
    jb = -(-dhc // info.compute_units)
    if batch * jb > min(GRID_MAX_ITEMS, info.max_work_group_size):
        return None
    if local_bytes(jb) > info.local_mem_bytes:
        return None
    return jb


# Batch rows per work-item of the grid-wide forward (one-stage cells; a vanilla GRU's two
# stages keep one): each weight vector read from local memory then serves that many rows, but
# the group has that many times fewer work-items to hide latency with. H200, grid kernel's
# device time (ms) for 1 / 2 / 4 rows: LSTM 512 N 64 T 50 0.866 / 0.797 / 1.075; LSTM 256
# N 200 T 28 0.490 / 0.428 / 0.827; LSTM 512 N 16 0.514 / 0.793 (2 rows); LBR-GRU and
# vanilla RNN 512 N 64 at 4 rows 0.98 and 0.95 against 0.72 and 0.64. So two rows from
# GRID_ROWS_MIN_BATCH rows up, else one.
GRID_ROWS_MIN_BATCH = 64


def grid_rows_per_item(batch: int) -> int:
    """Rows per work-item of the grid-wide forward for ``batch`` rows."""
    return 2 if batch >= GRID_ROWS_MIN_BATCH else 1


# A group has few work-items where the batch is small (one row and 4 channels: 4 items), and
# each walks all channels of h alone, latency after latency. One-stage cells then split each
# output's k range over ks lanes of a warp, which add their partial sums by shuffles; and
# every grid kernel stages h in the widest chunk of GRID_CHUNK_COLUMNS its local memory holds
# (fewer chunks, fewer local barriers and L2 round trips a step). H100, LSTM 512 T 50, grid
# kernel's us per step, unsplit 32-column chunks -> split (ks) and chunk (kc):
# - N 1: 9.47 -> ks 8 5.81, ks 16 5.11; ks 8 kc 64 4.34, kc 128 4.07; ks 16 kc 64 3.75,
#   kc 128 3.17 (LBR-GRU 9.33 -> 3.03, vanilla RNN 7.58 -> 2.74 at ks 16 kc 128)
# - N 4: 7.70 -> ks 2 6.55, ks 4 5.86; ks 4 kc 64 4.75, kc 128 4.53; ks 8 kc 64 5.06
# - N 8: 7.99 -> ks 2 6.50; ks 2 kc 64 6.01; ks 4 kc 64 5.62, kc 128 5.23
# - N 16: 8.18 -> ks 2 7.47, ks 4 9.39; ks 2 kc 64 6.98, kc 128 6.42; ks 4 kc 64 8.63
#   (LBR-GRU 7.92 -> ks 2 kc 64 6.81)
# - N 32: 11.33 -> ks 2 11.56; kc 64 alone 15.34; ks 2 kc 64 10.52
# - N 64 (2 rows per item, only 32 columns fit): 15.9 -> ks 2 13.8, ks 4 19.0 (LBR-GRU 15.1 ->
#   13.4, vanilla RNN 11.4 -> 11.0); the two-stage GRU, unsplit: kc 32 23.7, kc 64 21.3
# So: the smallest split that gives the group GRID_SPLIT_ITEMS items, at least 2 and at most
# GRID_MAX_K_SPLIT, unless the group (rounded up to whole warps) would outgrow the device.
# Staged rows without their padding float (columns XOR-swizzled by row instead, one-stage
# cells) let a wider chunk fit; taken where they do (H200, us a step, padded -> swizzled):
# LBR-GRU 512 N 64 kc 32 13.15 -> kc 64 12.05, LSTM 512 N 32 kc 64 10.38 -> kc 128 9.81,
# LSTM 512 N 64 kc 32 13.58 -> kc 64 13.62.
GRID_SPLIT_ITEMS = 128
GRID_MAX_K_SPLIT = 16
GRID_CHUNK_COLUMNS = (128, 64, 32)


def grid_k_split(info, items: int) -> int:
    """Lanes sharing one output's k range in a grid-wide forward group of ``items`` unsplit
    work-items (one-stage cells; the group is then rounded up to whole warps)."""
    ks = 2
    while ks < GRID_MAX_K_SPLIT and items * ks < GRID_SPLIT_ITEMS:
        ks *= 2
    warp = info.simd_width
    if -(-items * ks // warp) * warp > min(GRID_MAX_ITEMS, info.max_work_group_size):
        return 1
    return ks


def grid_chunk_columns(dhc: int, fits) -> int:
    """Columns of h a grid-wide forward group stages at a time: the widest of
    GRID_CHUNK_COLUMNS that ``fits(kc)`` (its local memory) and pads k no further than
    32-column chunks would."""
    k32 = -(-dhc // 32) * 32
    for kc in GRID_CHUNK_COLUMNS:
        if k32 % kc == 0 and fits(kc):
            return kc
    return 32


# Where a group's slice of the weights outgrows local memory (DeepSpeech2's 1760 channels: 14
# channels x 4 gates x 1760 columns, 394 KiB, against NVIDIA's 48 KiB) the grid form reads
# them from global memory every step (one-stage cells, kernels/rnn_persistent_grid.py
# ``wglobal``): the whole recurrence still takes one launch, and the weights (49.6 MB at 1760
# channels) stream at the L2's and memory's bandwidth instead of as 50 GEMM launches. A group
# holds a multiple of GRID_GLOBAL_JB_ALIGN channels (a warp's reads of one weight row are whole
# 32-byte sectors), a work-item four channels (one float4 read per gate and column) and up to
# GRID_GLOBAL_MAX_ROWS rows, and k is split over lanes until the group has as many work-items
# as GRID_GLOBAL_REGISTERS registers hold with their accumulators (4 x gates x rows floats)
# and GRID_GLOBAL_ITEM_REGISTERS others each. Measured on an H200, LSTM 1760 T 50, grid
# kernel's us a step:
# - N 1: scalar weight reads, one channel per item, 256 items 46.3, 512 33.2 (the per-step
#   path: 36); float4 reads, 512 items 27.5 (256-column chunks), 1024 20.9, and with 512-column
#   chunks 16.5 (LBR-GRU 10.1, vanilla RNN 4.2);
# - N 2: 512 items 18.6, 256 24.5; N 4 (4 rows per item): 512 items 20.4-20.5, 256 23.7,
#   1024 142.9 (the accumulators spill); N 8: 512 items 31.1 (LBR-GRU 14.9), 256 24.7 (LBR-GRU
#   15.6), 128 51.5: LSTM's best there is not the rule's (not understood yet);
# - N 32 (4 rows per item, 512 items): 86, slower than the per-step path at that batch, hence
#   GRID_GLOBAL_MAX_BATCH.
# Whole primitive against the per-step path (H200, benchdnn, same run): LSTM N 1 1.805 ->
# 1.137 ms (cuDNN 1.13), LBR-GRU N 1 1.480 -> 0.734 (cuDNN 0.90). Up to N 16 it still wins
# (H200, benchdnn min ms, per-step path -> this form; cuDNN ratio): LBR-GRU 800 channels
# T 100 3.893 -> 1.631 (0.48x -> 1.08x), LSTM 800 T 100 3.814 -> 2.072 (0.60x -> 1.06x),
# LSTM 1760 T 50 3.133 -> 3.098; at N 32, LSTM 1760 4.681 -> 5.347 (LBR-GRU 4.049 -> 3.941).
# Channels per group aligned to 8 (was 16; 8 floats are still one whole 32-byte sector per
# weight row): 800 channels take 100 groups instead of 50. H200, same run, 16 -> 8: LBR-GRU
# 800 N 16 T 100 inference 1.632 -> 1.452 ms (cuDNN 1.80-1.86), DeepSpeech2's bidirectional
# GRU layer with lengths 2.87 -> 2.50 ms of grid kernels, the whole model's inference
# 18.6-18.8 -> 17.5-17.9 ms a batch; LSTM 800 N 16 2.079 -> 2.089, LSTM 1760 (16 channels
# either way) N 1 0.987 -> 0.987, N 4 1.481 -> 1.427.
GRID_GLOBAL_JB_ALIGN = 8
GRID_GLOBAL_MAX_ROWS = 4
GRID_GLOBAL_MAX_BATCH = 16
GRID_GLOBAL_REGISTERS = 1 << 16  # 32-bit registers of an NVIDIA multiprocessor
GRID_GLOBAL_ITEM_REGISTERS = 48
GRID_GLOBAL_MAX_K_SPLIT = 256


def grid_global_weights(info, batch: int, dhc: int, gates: int) -> tuple[int, int, int] | None:
    """``(jb, ks, rn)`` of the grid-wide forward reading its weights from global memory:
    channels per group, lanes sharing an output's k range, batch rows per work-item; None
    where the device has no grid form, the batch is large or the channels do not come in
    quads."""
    if (not (info.is_gpu and info.inline_ptx) or info.compute_units < 2 or dhc % 4
            or batch > GRID_GLOBAL_MAX_BATCH):
        return None
    jb = -(-dhc // info.compute_units)
    jb = -(-jb // GRID_GLOBAL_JB_ALIGN) * GRID_GLOBAL_JB_ALIGN
    rn = min(batch, GRID_GLOBAL_MAX_ROWS)
    rows = -(-batch // rn) * (jb // 4)
    items = GRID_GLOBAL_REGISTERS // (4 * gates * rn + GRID_GLOBAL_ITEM_REGISTERS)
    ks = 1
    while ks < GRID_GLOBAL_MAX_K_SPLIT and rows * ks * 2 <= items:
        ks *= 2
    if -(-rows * ks // 32) * 32 > min(GRID_MAX_ITEMS, info.max_work_group_size):
        return None
    return jb, ks, rn


# The global-weights form stages h in chunks up to GRID_GLOBAL_CHUNK_COLUMNS wide: its chunks
# hold no weights, so wide ones fit, and fewer chunks mean fewer local barriers a step (the
# padded columns' weight reads are predicated off).
GRID_GLOBAL_CHUNK_COLUMNS = (512, 256, 128, 64, 32)


def grid_global_chunk_columns(fits) -> int:
    """Columns of h a global-weights grid group stages at a time."""
    for kc in GRID_GLOBAL_CHUNK_COLUMNS:
        if fits(kc):
            return kc
    return 32


# The backward's grid-wide form (kernels/rnn_persistent_grid_bwd.py) is taken for cells of at
# most GRID_BWD_MAX_GATES gates. Its dh_prev = dG U^T first read one dG value and one weight
# from local memory per multiply-add; measured on an H200 (forward + backward, N 64, T 50,
# forward grid-wide in both; per-step backward -> grid-wide, median ms): vanilla RNN 512 3.52
# -> 2.24 and LBR-GRU 512 4.13 -> 3.88 won, LSTM 512 4.41 -> 4.93 and LSTM 256 2.95 -> 3.14
# lost. Reading both four columns at a time (aligned vectors, rows padded off each other's
# banks), every cell kind wins (H200, two rounds): LSTM 512 4.40-4.43 -> 4.12-4.14, LSTM 256
# 2.91-2.99 -> 2.42-2.48, LBR-GRU 512 4.17-4.21 -> 3.65-3.78, vanilla RNN 512 3.21-3.25 ->
# 1.82-1.93.
GRID_BWD_MAX_GATES = 4

# The backward's dh_prev = dG U^T in the split form (kernels/rnn_persistent_grid_bwd.py, ks >
# 1): dG read from global memory four columns at a time, each read serving every channel of
# the group, k split over a warp's lanes, rn rows per item. Taken where the group then has at
# most GRID_MAX_ITEMS items and the channels' gates come in whole float4s. The staged form
# spent 33 us a step at LSTM 512 N 64 (a dG chunk through local memory, one output per item:
# 256 items, two local barriers per 32 columns). H200, the backward kernel's device time, T 50
# (rn, ks): staged 1.674 ms, (2, 32) 0.575, (1, 16) 0.727, (4, 16) 0.915; whole forward +
# backward (benchdnn, two rounds) 3.54-3.68 -> 2.45-2.56 ms, 0.85-0.87x -> 1.20-1.36x cuDNN;
# LBR-GRU 512 2.15-2.29 ms, 1.27-1.45x (1.02x before).
GRID_BWD_SPLIT_LANES = 32
GRID_BWD_ITEM_REGISTERS = 64  # registers an item may hold at the largest group


def grid_backward_split(info, batch: int, jb: int, gd: int) -> tuple[int, int]:
    """``(rn, ks)`` of the grid-wide backward's product: rows per item and lanes per k range;
    ``(1, 1)`` for the staged form."""
    if gd % 4 or not info.inline_ptx:
        return 1, 1
    ks = GRID_BWD_SPLIT_LANES
    rn = 1
    while -(-batch // rn) * ks > min(GRID_MAX_ITEMS, info.max_work_group_size):
        rn *= 2
    if rn * jb + 4 * jb > GRID_BWD_ITEM_REGISTERS // 2:
        return 1, 1
    return rn, ks


# Where the split form's rows of U outgrow local memory (DeepSpeech2's 800-channel LBR-GRU:
# 7 channels x 2400 columns, 67 KiB against 48) the product reads them from global memory
# every step (``wglobal``), each item's rows re-reading the group's slice from the L1 cache.
# Up to GRID_BWD_GLOBAL_MAX_BATCH rows; a group holds ceil(channels / compute units) channels
# and GRID_BWD_GLOBAL_ROWS rows per item, k split over a warp's lanes. H200, T 100, N 16
# (benchdnn BWD_DW min ms, per step -> this form, cuDNN): LBR-GRU 800 4.41 -> 3.68 (5.46),
# LSTM 800 (90 KiB slices) 4.80 -> 4.39 (6.27); LSTM 1760 T 50 (394 KiB slices, beyond the
# L1) 6.89 -> 11.85 (9.20), hence GRID_BWD_GLOBAL_MAX_SLICE. The DeepSpeech2 layer with
# lengths (bidirectional, kernel ms of the grid backward, 1 / 2 / 4 rows an item): 2.73 /
# 2.18 / 3.52, against 7.72 for the whole per-step backward.
GRID_BWD_GLOBAL_MAX_BATCH = 16
GRID_BWD_GLOBAL_ROWS = 2
GRID_BWD_GLOBAL_REGISTERS = 96  # floats an item may hold: rows x channels sums + weights
GRID_BWD_GLOBAL_MAX_SLICE = 128 << 10  # bytes of U a group reads every step


def grid_backward_global(info, batch: int, dhc: int, gd: int) -> tuple[int, int, int] | None:
    """``(jb, rn, ks)`` of the grid-wide backward reading its weights from global memory:
    channels per group, rows per item, lanes per k range; None where the device has no grid
    form, the batch is large, the gates' columns do not come in float4s, a group's slice of
    the weights outgrows the cache or its registers would not hold its sums."""
    if (not (info.is_gpu and info.inline_ptx) or info.compute_units < 2 or gd % 4
            or batch > GRID_BWD_GLOBAL_MAX_BATCH):
        return None
    jb = -(-dhc // info.compute_units)
    if 4 * jb * gd > GRID_BWD_GLOBAL_MAX_SLICE:
        return None
    rn = min(batch, GRID_BWD_GLOBAL_ROWS)
    ks = GRID_BWD_SPLIT_LANES
    while -(-batch // rn) * ks > min(GRID_MAX_ITEMS, info.max_work_group_size):
        rn *= 2
    if rn * jb + 4 * jb > GRID_BWD_GLOBAL_REGISTERS:
        return None
    return jb, rn, ks


# The per-step backward's recurrent GEMM (dh_prev = dG U^T, few rows, k = gates x channels)
# read U transposed as it lies: on an H200 the DeepSpeech2-like training's (32 x 1760 x
# 7040, split 16 along k) took 157 us a step, against 62 for the forward's 32 x 7040 x 1760
# reading the same weights plainly. GPUs copy U transposed once per execution and the GEMM
# reads the copy plainly: 65 us a step, the copy 0.47 ms with one work-item per element, 0.033
# in local-memory tiles (heuristics/reduction.py). H200, forward + backward, two rounds:
# DeepSpeech2-like 16.12-16.34 -> 11.55-11.72 ms (cuDNN 10.2), vanilla GRU 512 N 64 (its
# two-stage backward runs per step) 5.68-5.73 -> 4.69-4.76. Smaller weights than
# TRANSPOSED_U_MIN_ELEMS were not measured; the grid-wide backward has no such GEMM.
TRANSPOSED_U_MIN_ELEMS = 1 << 18


def transposed_recurrent_weights(info, sic: int, cols: int) -> bool:
    """Whether the per-step backward reads a transposed copy of the recurrent weights
    (``sic`` x ``cols``)."""
    return info.is_gpu and sic * cols >= TRANSPOSED_U_MIN_ELEMS


def persistent_private_weights(info, gates: int, dhc: int) -> bool:
    """Whether the one-launch recurrence keeps a work-item's weight columns in registers."""
    return gates * dhc <= PERSISTENT_PRIVATE_U


# Work-items per work-group of the cell kernels along the channels. Intel's CPU runtime pays
# per work-group: the digits LSTM's cells (64 x 128 units) ran 27 us per step forward and 29
# backward with 32, 19 and 19 with 128 (AVX-512 Xeon). GPUs keep 32 (one warp).
# CPUs take up to CPU_CELL_WG channels a group, split into equal groups of whole SIMD vectors
# (760 channels: 2 groups of 384, not 512 + 248). LSTM 512, N 64, T 50, kernel profiles,
# 2-core AVX-512 Xeon (machine shared, quiet rounds, interleaved), the 50 cells' ms, 128 ->
# 512 wide: inference 5.23-5.91 -> 5.05-5.66 (7 rounds each); training forward 6.39-6.61 ->
# 5.72-5.87, backward 8.17-8.33 -> 7.63-7.86 (2 rounds). Whole inference primitive: within
# noise (the cells are a tenth of it).
CPU_CELL_WG = 512
GPU_CELL_WG = 32


def cell_wg(info, dhc: int) -> int:
    """Work-group width of the elementwise cell kernels for ``dhc`` channels."""
    if info.is_gpu:
        return min(dhc, GPU_CELL_WG)
    cap = max(1, min(CPU_CELL_WG, info.max_work_group_size))
    if dhc <= cap:
        return dhc
    groups = -(-dhc // cap)
    simd = max(1, int(info.simd_width or 1))
    wg = -(-dhc // groups)
    return min(cap, -(-wg // simd) * simd)


# The forward cell kernels' tanh as 2 / (1 + exp(-2 x)) - 1 on CPUs, inference (training's
# forward was not measured): the runtimes' vector tanh costs more than an exp and a division.
# 2-core AMD EPYC (Zen 3, AVX2), isolated LSTM cell kernels, gx read cold, the steps' summed
# kernel time, min ms of 12 interleaved rounds (machine shared, load 6): Intel's runtime, N 200
# 256 channels T 28 (MNIST rows) 12.2 -> 8.2, N 64 512 channels T 50 9.0 -> 7.1; PoCL 113 ->
# 110 and 85 -> 70 (8 rounds). Without either tanh (timing only) Intel's took 20.8 against
# 28.2 (load 8): tanh was a third of the cell. Largest error against float64 tanh 2.2e-7 in h
# (tanh's own 1.2e-7); exp's overflow gives -1, its underflow 1, NaN stays NaN. Tried and not
# taken: native_exp (error 9e-5) and -cl-fast-relaxed-math (6e-5), beyond the f32 tests' 1e-5.
def cell_tanh_via_exp(info, training: bool) -> bool:
    """Whether the forward cell kernels compute tanh as 2 / (1 + exp(-2 x)) - 1
    (``ElementwiseProblem.tanh_exp``) rather than calling tanh: CPU inference."""
    return info.is_cpu and not training


def weight_gradient_copies(info, k: int, n: int, itemsize: int = 4) -> bool:
    """Whether the weight-gradient GEMMs (B: ``k`` rows, time steps x batch, of ``n``
    columns) read A transposed and B packed into scratch copies: CPUs, once B outgrows the
    cache a core works from (``DeviceInfo.core_cache_bytes``), whose register-tile kernel
    then streams both contiguously (Intel's
    runtime, 512 x 2048 x 3200: 149 ms reading them as they lie, 42 ms with both copies
    included). Below it the copies cost more than they save (AVX-512 Xeon, the digits LSTM's
    128 x 512 x 448 and two smaller ones: 250 us of copies for 80 us of GEMM time; the
    training step 2.49 -> 2.22-2.36 ms without them). GPUs' local-memory tiles read them as
    they lie."""
    cache = info.core_cache_bytes
    return info.is_cpu and k * n * itemsize > cache



# Tried and not taken (CPUs): the layer GEMM (gx = x W over every step at once) in chunks of
# whole steps launched just before the steps that read them, each chunk's gx within half the
# cores' caches (LSTM 512 N 64 T 50: 25 launches of 2 steps instead of one of 50, whose gx is
# 26 MB). 2-core AVX-512 Xeon, Intel's runtime: whole primitive within noise (machine shared,
# 10 rounds, CPU ms: 102.5-118.1 chunked against 100.7-121.7), layer GEMM 27.3 ms chunked
# against 26.4 whole (kernel profiles, quiet), the MNIST-rows LSTM's 3.9 against 3.4 with its
# cell kernels 3.8 against 4.4 (kernel profiles, machine shared).

# Tried and not taken (CPUs): an LSTM step as one hand-written kernel, the recurrent GEMM in
# register tiles of 6 rows x 4 gates x 16 channels over U packed in 16-column panels, the
# cell's formulas as the tile's epilogue (no gh buffer, one launch a step; the runtime's
# float16 exp()/tanh() run scalar, so a polynomial exp). 2-core AVX-512 Xeon, Intel's runtime,
# LSTM 512 N 64, the 50 steps: quiet machine, wall ms, 8 rounds: GEMM + cell kernel 29.4-34.6,
# one kernel 26.2-30.2; in the whole primitive (kernel profile) 32.8 against 26.7 + 5.9 for
# the two, and once the tuned GEMM unrolled k by 2 (heuristics.gemm) the two kernels won
# (machine shared, CPU ms: 58-65 against 67-71; 5 rows and k unrolled by 2: 56-61). The cell
# work's own time is mostly its reads of gx (the prototype with bias read in place of gx:
# 47-48 CPU ms against 59-61), not the gate arithmetic.

# Tried and not taken (CPUs, issue 18; LSTM 512 N 64 T 50 inference, 2-core AVX-512 Xeon,
# Intel's runtime, kernel profiles of quiet interleaved rounds, ms for the 50 steps):
# - gx through the recurrent GEMM: each step's GEMM adding its product into the step's gx in
#   place, halved (alpha = beta = 0.5), the cell kernel reading that slot as both gx and gh
#   (exact: halving and doubling are). The cells' cold reads of gx move into the GEMM's
#   epilogue and cost it more there: cells 4.77-5.12 -> 3.66-3.85, recurrent GEMMs
#   21.6-22.8 -> 24.6-25.6 (4 rounds each). With gx read from one step's slot every step
#   (timing only) the cells took 3.6 against 5.5: a fifth of their time is gx's reads.
# - The per-execution packing of both weights (pack_b, 1.2-1.5 ms of profile) in 128- or
#   64-deep k chunks per work-group instead of 16: 1.24-1.51 against 1.40-1.48 (3 rounds).
#   Packing once (weights "any" resolving to packed panels) needs panels that never cross a
#   gate, i.e. ldgOi32o / ldgOi16o: 8x32 tiles (k unrolled by 4) ran 337-350 GFLOP/s at
#   64x2048x512 against 345-366 for 8x48 and 343-351 against 340-354 at 3200x2048x512
#   (isolated kernels, 6-8 rounds): about 0.6 ms lost on the recurrence for 1.1 saved; not
#   built.
# - The recurrent GEMM's work order (isolated kernel, GFLOP/s median-best of 15 rounds):
#   8x48 as is 354-369, m_loop 8 (one work-group per B panel, U read once a step) 364-371,
#   m_inner 362-367, m_loop 2 364-366: within noise, so U's 4 MB streaming from L3 eight times
#   a step does not bound it. The kernel's k loop (Intel's disassembly,
#   CL_CONFIG_DUMP_DISASSEMBLY) is 48 FMAs, 16 broadcasts from memory and 6 B loads per k
#   pair with 30 of the 32 zmm registers live: an in-L1 6400x96x256 runs the same 346-355,
#   so the FMA ports bound it (OpenBLAS 264 there, 311 at 3200x2048x512; PyTorch's own
#   matmul 352 and 243 at 64x2048x512), and a software-pipelined k loop or A broadcasts kept
#   in registers (no registers left) have nothing to win.


# Inference weights left to the primitive (``format_tag.any``) resolve to ``ldgOi<w>o``
# (plan_forward.weights_panels) where a GEMM reading them takes B in w-column panels as they
# lie, so that no execution packs them (LSTM 512 inference packed 2 x 4 MB per execution,
# 0.9-1.7 ms of kernel profile). 2-core AVX-512 Xeon, Intel's runtime, isolated kernels
# (min ms, interleaved rounds, shared machine); tiles rows x cols, k unrolled by ku, B in
# pw-column panels (pw < cols: the tile reads cols / pw panels side by side):
# - the recurrent GEMM, 64x2048x512: 8x48 ku2 over pw 48 (the tuned kernel, packed per
#   execution) 0.528 / 0.589, over pw 16 0.512 / 0.561 (10 rounds each); 8x32 ku4 over pw 32
#   0.619, 8x32 over pw 16 0.827. So the recurrent weights take panels of one vector (16)
#   and keep the tuned tile.
# - the layer GEMM, 3200x2048x512: 8x48 over pw 48 18.7 / 18.0, over pw 16 20.4 (and 21.9
#   against 20.7 in 12 other rounds: 5-10% slower); 8x32 ku4 over pw 32 18.5 / 18.0 (8 and
#   6 rounds), ku2 22.6-24.4, over pw 16 29-32. So the layer weights take panels of 32 and a
#   tile as wide where the tuned tile is 8x48 (or panels as wide as the tuned tile).
PANEL_LAYER_TILE = {"cols": 32, "k_unroll": 4}
# ... but a second GEMM program costs the first-ever creation its compilation (LSTM 512
# inference with every cache empty, same machine: 4 programs 0.61 s, against 3 programs and
# the one GEMM program of both roles 0.36-0.40 s; the bound is 0.5 s), and the layer
# GEMM runs once per layer (3200 rows: 1-2 ms of the 50): both roles read the panels of one
# vector with the tuned tile, one program.
PANEL_LAYER_OWN_TILE = False


# 8-wide CPUs (AVX2: 16 vector registers), both roles: a 6x16 tile with k unrolled by 4 over
# 16-column panels (8-column ones where a gate is no whole number of 16), in place of the
# tuned 4x24 tile reading its 24 columns from three 8-column panels side by side. 2-core AMD
# EPYC (Zen 3, AVX2), Intel's runtime, isolated kernels with random data, 5 interleaved
# rounds, min / median ms, 4x24 over 8-column panels -> 6x16 ku4 over 16 (over 8):
# 200x1024x256 (the MNIST LSTM's step) 1.139 / 1.315 -> 0.743 / 0.868 (0.751 / 0.855);
# 64x2048x512 (LSTM 512's step) 1.047 / 1.185 -> 0.873 / 0.963 (0.889 / 0.930); 3200x2048x512
# (its layer GEMM) 43.5 / 44.8 -> 41.4 / 43.9 (40.3 / 42.4); 5600x1024x28 (MNIST's layer GEMM)
# 3.10 / 3.34 -> 2.85 / 3.19 (2.98 / 3.28). The 4x24 tile over its own 24-column panels
# (packed per execution) ran 200x1024x256 in 0.73-0.79: the three panel streams, not the
# tile, cost Intel's runtime. PoCL on the same machine: within noise either way (200x1024x256
# 0.815 / 0.914 -> 0.812 / 0.909; 64x2048x512 0.915 / 0.960 -> 0.942 / 0.991).
PANEL_8WIDE_TILE = {"rows": 6, "cols": 16, "k_unroll": 4}


def weights_panel(info, role: str, params: dict,
                  dhc: int | None = None) -> tuple[int, dict | None] | None:
    """``(w, params)`` for weights stored in w-column panels read by a GEMM of ``role``
    (``"layer"``: many rows; ``"iter"``: the recurrent step) whose tuned parameters are
    ``params``: the panel width, and the register tile to use instead of the tuned one (None:
    the tuned one); None where the weights stay plain (packed per execution). ``dhc``: the
    channels of a gate (a panel never crosses a gate)."""
    if not info.is_cpu or not params["packed_b"] or params["local_prefetch"]:
        return None
    vec, cols = params["vec"], params["cols"]
    if vec == 8 and int(info.simd_width or 1) == 8:
        tile = dict(params, vec=8, m_inner=False, m_loop=1, **PANEL_8WIDE_TILE)
        return (16 if dhc is None or dhc % 16 == 0 else 8), tile
    if role == "iter" or not PANEL_LAYER_OWN_TILE:
        return (vec, None) if cols % vec == 0 else None
    if cols == 48 and vec == 16:
        return 32, dict(params, **PANEL_LAYER_TILE)
    return cols, None
