"""Device rules of the pooling family: the work-group size of the one-output-per-work-item
kernels (``pydnnl/kernels/pooling.py``).

GPUs: 256 work-items per group keeps the loads coalesced and several groups in flight per
compute unit. CPUs: Intel's runtime vectorizes across the work-items of a group (16 lanes on
AVX-512), so a group is a run of SIMD vectors over consecutive outputs; groups of 128 to 1024
measured the same on the eltwise kernels of the same shape (see ``heuristics/eltwise.py``),
256 is taken here as well. Problems smaller than a group use one group of their size.
"""
from __future__ import annotations

POOL_WG = 256


def work_group_size(info, total: int) -> int:
    """Work-items per group for a pooling kernel over ``total`` outputs (0 lets the OpenCL
    runtime choose, for problems smaller than a group)."""
    wg = min(POOL_WG, int(info.max_work_group_size or POOL_WG))
    return wg if total >= wg else 0
