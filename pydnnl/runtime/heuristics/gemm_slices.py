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
from ...kernels.gemm_nv import NvTile, blocks, smem_bytes, supports

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


def sliced_tile(info, prob: GemmProblem, tile: NvTile | None) -> NvTile | None:
    """``tile`` (the device rule's blocking, None where the loopy family would run) with k
    shared over ``kslices`` work-groups per block where C's blocks leave the device's units
    idle; ``tile`` unchanged elsewhere."""
    if info is None or not info.is_gpu or info.vendor_family != "nvidia" or prob.batch > 1 \
            or prob.runtime_k or prob.runtime_m:
        return tile
    if tile is not None and (tile.mma or tile.kslices > 1):
        return tile
    if tile is not None:  # its blocking, k shared among work-groups instead of k-groups
        base = replace(tile, ksplit=1)
    else:
        side = "n" if prob.m > prob.n else "tiny" if prob.m < 32 else "m"
        base = _SLICED_BASE[side, 16 if prob.k % 16 == 0 else 8]
    units = max(1, info.compute_units)
    nb = blocks(prob, base)
    if nb > IDLE_FRACTION * units or prob.k % base.bk:
        return tile
    nk = prob.k // base.bk
    s = 1
    for least in (MIN_SHARE_K, FALLBACK_SHARE_K):
        fit = [d for d in range(2, nk + 1) if nk % d == 0 and nb * d <= SLICES_PER_UNIT * units
               and prob.k // d >= least]
        if fit:
            s = max(fit)
            break
    if s == 1:
        return tile
    t = replace(base, kslices=s, fence="ptx" if getattr(info, "inline_ptx", False) else "cl")
    if not supports(prob, t) or t.threads > info.max_work_group_size \
            or smem_bytes(t) > info.local_mem_bytes:
        return tile
    return t
