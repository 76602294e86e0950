"""Device rules of the eltwise family (launch shapes of the flat and strided kernels)."""
from __future__ import annotations

# One element per work-item, work-groups of FLAT_WG. GPUs: coalesced loads, plenty of
# work-groups in flight. CPUs: Intel's runtime vectorizes across work-items (16 lanes on
# AVX-512), so a work-group is a run of SIMD vectors over consecutive elements. Measured on
# Intel's CPU runtime (2-core AMD EPYC, relu forward over 64 MiB, GB/s of bytes read plus
# written): one element per work-item 53-58 GB/s for work-groups of 128 to 1024, 37 at
# 4096; a loop of 2 elements per work-item 23, of 16 28 (the loop defeats the vectorizer).
FLAT_WG = 256
FLAT_ITERS = 1


def flat_params(info, count: int) -> tuple[int, int]:
    """(work-group size, elements per work-item) of the flat kernel over ``count`` elements.
    GPUs stream several elements per work-item (see heuristics.binary.ITEMS_GPU)."""
    from .binary import items

    return min(FLAT_WG, info.max_work_group_size), items(info) if info.is_gpu else FLAT_ITERS


def strided_wg(info) -> int:
    """Work-items along the output's innermost dimension in the strided kernel."""
    return min(64, info.max_work_group_size)
