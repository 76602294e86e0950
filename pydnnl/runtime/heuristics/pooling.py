"""Device rules of the pooling family: the work-group shape of the kernels of
``pydnnl/kernels/pooling.py``, which cover the output with a 2-D range: axis 0 along the
output's innermost axis (channels for nhwc, width for nchw, the channel block for nChw16c),
axis 1 over the other elements.

CPUs: Intel's runtime vectorizes axis 0 of a work-group (16 lanes on AVX-512), so the lanes
must be consecutive addresses along that axis, and a group of one row keeps every other index
uniform across the vector (the per-row index arithmetic is then scalar). One row of up to 256
lanes per group. GPUs: 256 work-items per group, as rows of up to 256 lanes, several rows
when the innermost axis is short (coalesced loads along axis 0, enough groups in flight).
"""
from __future__ import annotations

POOL_WG = 256


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def work_group_size(info, lanes: int, rows: int) -> tuple[int, int]:
    """(lanes, rows) of a pooling work-group over ``lanes`` x ``rows`` work-items; ``(0, 0)``
    lets the OpenCL runtime choose (problems smaller than one SIMD vector)."""
    wg = min(POOL_WG, int(info.max_work_group_size or POOL_WG))
    l0 = min(wg, _pow2_at_least(max(lanes, 1)))
    if lanes * rows < 16:
        return (0, 0)
    if not info.is_gpu:
        return (l0, 1)
    return (l0, max(1, min(wg // l0, _pow2_at_least(rows))))
