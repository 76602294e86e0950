"""Device rule: k shared among the work-groups of one block of C (``NvTile.kslices``).

A GEMM whose C has few blocks and whose k is long (a classifier's 32 x 1000 x 2048, an inner
product's backward at a small batch) leaves most compute units idle whatever the register
tile: the SIMT kernel's blocks each walk all of k. Cutting k into shares, one work-group
each, fills the units in one launch; the last work-group of a block to finish adds the
shares (:mod:`pydnnl.kernels.gemm_nv`). Callers opt in (``get_gemm(..., slices=True)``):
they bind the workspace the shares need (:meth:`Plan.gemm` does).
"""
from __future__ import annotations

from dataclasses import replace

from ...kernels.gemm import GemmProblem
from ...kernels.gemm_nv import MMA_KINDS, NvTile, blocks
from .gemm import tensor_cores, tile_fits

# thin blocks by C's short side (m below 32: one 16-row block; m; n) and slice depth (8-deep
# where k is not a whole number of 16-deep slices: a classifier's backward data, k = 1000)
_SLICED_BASE = {
    ("tiny", 16): NvTile(16, 64, 16, 4, 4), ("m", 16): NvTile(32, 64, 16, 4, 4),
    ("n", 16): NvTile(64, 32, 16, 4, 4),
    ("tiny", 8): NvTile(16, 32, 8, 4, 4), ("m", 8): NvTile(32, 32, 8, 4, 4),
    ("n", 8): NvTile(32, 32, 8, 4, 4),
}
# shares per block: the most (any divisor of k's slices) with at least MIN_SHARE_K of k each
# (or, where no such share exists, FALLBACK_SHARE_K) and at most SLICES_PER_UNIT work-groups
# per compute unit in all. H200, ms against PyTorch CUDA in the same process:
#   ip mb32ic2048oc1000 (16 blocks of 32x64): 8 shares of 256: 0.0137; 16 of 128: 0.0147;
#     32 of 64: 0.0240 (loopy family before: 0.0661; PyTorch 0.0225)
#   ip mb256ic2048oc1000 (32 blocks of 128x64): 4 shares 0.0413, 8: 0.0379, 16: 0.0456
#     (before 0.1323; PyTorch 0.057)
#   ip mb64ic2048oc1000: 4 shares 0.0188, 8: 0.0175 (PyTorch 0.0378)
#   matmul 8x4096:4096x4096 (64 blocks of 16x64): 2 shares 0.106, 4: 0.058, 8: 0.0385
#     (PyTorch 0.044)
# shares of 256 up to 4 groups per unit take the best of each
SLICES_PER_UNIT = 4
MIN_SHARE_K = 256
FALLBACK_SHARE_K = 128
# a block count this small (against the compute units) is worth sharing k over
IDLE_FRACTION = 0.5
# tensor-core thin blocks, for a fpmath mode that allows them (an RNN's per-step products: m
# the batch, k the channels), k shared over up to 8 work-groups per unit: their blocks are
# small and hold little shared memory, and a step's product is bound by how many loads are
# in flight. H200, DeepSpeech2-like training (LSTM 1760, N 32) with tf32, us per step's
# product (forward 32 x 7040 x 1760, backward 32 x 1760 x 7040) and the training's ms:
# SIMT thin tiles, 2 and 11 shares: 49.2, 53.8, 8.21; these tiles, same rule (4 per unit):
# 46.8, 40.7, 7.06; 8 per unit (5 and 22 shares): 28.3, 31.3, 5.67 (cuDNN with TF32 4.1);
# 16 per unit (11 and 55 shares): 29.9, 57.2, 7.05 (the last arrival adds 55 tiles); 32:
# 37.2, 162.7, 12.7
_SLICED_TC = {"m": NvTile(32, 64, 16, 4, 4, wm=16, wn=32),
              "n": NvTile(64, 32, 16, 4, 4, wm=32, wn=16)}
TC_SLICES_PER_UNIT = 8
TC_SHARE_K = (MIN_SHARE_K, FALLBACK_SHARE_K)


def _shares(info, prob: GemmProblem, base: NvTile, per_unit: int = SLICES_PER_UNIT,
            least_k: tuple = (MIN_SHARE_K, FALLBACK_SHARE_K)) -> int:
    """Work-groups per block for ``base``: the most (a divisor of k's slices) with at least
    ``least_k[0]`` of k each (else ``least_k[1]``) and ``per_unit`` groups per unit in all;
    1 where none."""
    units = max(1, info.compute_units)
    nb = blocks(prob, base)
    nk = prob.k // base.bk
    for least in least_k:
        fit = [d for d in range(2, nk + 1) if nk % d == 0 and nb * d <= per_unit * units
               and prob.k // d >= least]
        if fit:
            return max(fit)
    return 1


def _sliced_tc(info, prob: GemmProblem, math: str) -> NvTile | None:
    """A thin tensor-core tile, k shared where its blocks are few, for a product the
    tensor-core rule left to the SIMT kernel for want of blocks (C's short side 32 to 63)."""
    if math not in MMA_KINDS or not tensor_cores(info) or prob.k % 16 or prob.k < 128 \
            or not 32 <= min(prob.m, prob.n) < 64:
        return None
    base = replace(_SLICED_TC["n" if prob.m > prob.n else "m"], mma=math,
                   fence="ptx" if getattr(info, "inline_ptx", False) else "cl")
    s = 1
    if blocks(prob, base) <= TC_SLICES_PER_UNIT * max(1, info.compute_units):
        s = _shares(info, prob, base, TC_SLICES_PER_UNIT, TC_SHARE_K)
    t = replace(base, kslices=s)
    return t if tile_fits(info, prob, t) else None


def sliced_tile(info, prob: GemmProblem, tile: NvTile | None,
                math: str = "strict") -> NvTile | None:
    """``tile`` (the device rule's blocking, None where the loopy family would run) with k
    shared over ``kslices`` work-groups per block where C's blocks leave the device's units
    idle; ``tile`` unchanged elsewhere. ``math``: the fpmath mode's kind; where it allows
    tensor cores, a thin product takes a tensor-core tile (:func:`_sliced_tc`)."""
    if info is None or not info.is_gpu or info.vendor_family != "nvidia" or prob.batch > 1 \
            or prob.runtime_k or prob.runtime_m:
        return tile
    if tile is not None and (tile.mma or tile.kslices > 1):
        return tile
    tc = _sliced_tc(info, prob, math)
    if tc is not None:
        return tc
    if tile is not None:  # its blocking, k shared among work-groups instead of k-groups
        base = replace(tile, ksplit=1)
    else:
        side = "n" if prob.m > prob.n else "tiny" if prob.m < 32 else "m"
        base = _SLICED_BASE[side, 16 if prob.k % 16 == 0 else 8]
    units = max(1, info.compute_units)
    nb = blocks(prob, base)
    if nb > IDLE_FRACTION * units or prob.k % base.bk:
        return tile
    s = _shares(info, prob, base)
    if s == 1:
        return tile
    t = replace(base, kslices=s, fence="ptx" if getattr(info, "inline_ptx", False) else "cl")
    return t if tile_fits(info, prob, t) else tile
