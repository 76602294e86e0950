"""Device rules of the RNN family, each next to the measurement behind it."""
from __future__ import annotations

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
# when its batch x channels items fit one work-group and a step's recurrent multiply-adds
# (batch x gates x channels^2) are few enough for one compute unit to beat the per-step
# launches. The weights stay in registers when a work-item's columns are at most
# PERSISTENT_PRIVATE_U floats. (Limits set from the measurements in docs/performance.md,
# "One-launch recurrence".)
PERSISTENT_MAX_ITEMS = 1024
PERSISTENT_MAX_MACS = 1 << 20
PERSISTENT_PRIVATE_U = 128


def persistent_recurrence(info, batch: int, dhc: int, gates: int) -> bool:
    """Whether one work-group runs every step of a layer's recurrence in one launch."""
    items = batch * dhc
    return (items <= min(info.max_work_group_size, PERSISTENT_MAX_ITEMS)
            and batch * gates * dhc * dhc <= PERSISTENT_MAX_MACS)


def persistent_private_weights(info, gates: int, dhc: int) -> bool:
    """Whether the one-launch recurrence keeps a work-item's weight columns in registers."""
    return gates * dhc <= PERSISTENT_PRIVATE_U


# Work-items per work-group of the cell kernels along the channels. Intel's CPU runtime pays
# per work-group: the digits LSTM's cells (64 x 128 units) ran 27 us per step forward and 29
# backward with 32, 19 and 19 with 128 (AVX-512 Xeon). GPUs keep 32 (one warp).
CPU_CELL_WG = 128
GPU_CELL_WG = 32


def cell_wg(info, dhc: int) -> int:
    """Work-group width of the elementwise cell kernels for ``dhc`` channels."""
    return min(dhc, GPU_CELL_WG if info.is_gpu else CPU_CELL_WG)


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
