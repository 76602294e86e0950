"""Device rules of the pooling family: the work-group shape of the kernels of
``pydnnl/kernels/pooling.py``, which cover the output with a 2-D range: axis 0 along the
output's innermost axis (channels for nhwc, width for nchw, the channel block for nChw16c),
axis 1 over the other elements.

CPUs: Intel's runtime vectorizes axis 0 of a work-group (16 lanes on AVX-512), so the lanes
must be consecutive addresses along that axis, and a group of one row keeps every other index
uniform across the vector (the per-row index arithmetic is then scalar). Groups of 256
work-items, as rows of up to 256 lanes and as many rows as fit: measured on nhwc
16x64x128x128 max 3x3/2 (2-core EPYC, Intel's runtime, loaded machine) rows of 1, 4, 16 and 64
within noise of each other (forward 10.9-13.7 ms, backward 28.8-30.1 ms with 4+ rows against
42-44 ms with one), and needed where the innermost axis is short (nchw 32x2048x7x7 global
average pooling: 7 lanes per row). GPUs: the same shape (coalesced loads along axis 0, enough
groups in flight).
"""
from __future__ import annotations

POOL_WG = 256
SIMD_MIN = 16


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def work_group_size(info, lanes: int, rows: int, runtime: bool = False) -> tuple[int, int]:
    """(lanes, rows) of a pooling work-group over ``lanes`` x ``rows`` work-items; ``(0, 0)``
    lets the OpenCL runtime choose (problems smaller than one SIMD vector). ``runtime``: a
    kernel whose row count is an argument: the shape for any number of rows (the lanes'
    rule, rows filling the group), so every shape of its class shares it."""
    wg = min(POOL_WG, int(info.max_work_group_size or POOL_WG))
    l0 = min(wg, _pow2_at_least(max(lanes, 1)))
    if runtime:
        rows = wg
    elif lanes * rows < 16:
        return (0, 0)
    if not info.is_gpu and SIMD_MIN <= lanes <= wg:
        # CPUs: exactly the lanes, no masked tail (a kernel whose range is rounded up checks
        # its bounds, which masks every SIMD lane of it): measured on Intel's runtime, the
        # interior kernel of nchw max 3x3/2 mb32ic64ih112 (55 lanes), same process, minimum
        # of 15: 64-lane groups with the check 9.1 ms, 55-lane groups without 7.2-7.6 ms
        l0 = lanes
    # rows: up to 256 work-items per group on every device; on CPUs a short innermost axis
    # (nchw global pooling's width of 7) otherwise means one tiny group per row
    return (l0, max(1, min(wg // l0, _pow2_at_least(rows))))


def split_interior(info) -> bool:
    """Whether a forward whose lanes run along a strided width (nchw 3x3 stride 2) runs as two
    kernels: the interior lanes, whose windows lie inside the source, with ``vloadS`` of
    consecutive lanes (no clamped, strided loads, which Intel's CPU runtime turns into gathers),
    and the few edge lanes with the general code. CPUs only: a GPU's strided loads of a warp
    coalesce into the same cache lines (H100 max 3x3/2 forward: 0.89 of copy)."""
    return not info.is_gpu


def runtime_lane_dim(info) -> bool:
    """Whether a spatial dim the lanes run along (nchw's width) may be a kernel argument.
    GPUs: yes (their groups are a power of two of lanes anyway). CPUs: no, it stays baked:
    their groups hold exactly the lanes where 16 to 256 (see :func:`work_group_size`: nchw
    max 3x3/2 mb32ic64ih112, 55-lane groups 7.2-7.6 ms against 9.1 ms for 64-lane groups with
    the bounds check a run-time width needs), so the width is in the program's key either
    way; the minibatch, depth and height still come at run time."""
    return bool(info.is_gpu)


def runtime_spatial(info) -> bool:
    """Whether the spatial sizes (and the strides built from them) are kernel arguments, or
    only the minibatch: the minibatch only, on every device (the run-time form with spatial
    sizes stays, tested, for a device that gains from it). H200 (NVIDIA's OpenCL), nchw max
    3x3/2 mb32ic64ih112 forward, kernel minimum of 20 runs, twice: spatial sizes at run time
    0.0507-0.0509 ms, the minibatch only 0.0452-0.0454 ms, the baked kernel 0.0453-0.0455
    (its taps' clamps and addresses then use constants). Measured on
    the 2-core AVX-512 Xeon (Intel's runtime; baked and run-time primitives in one process,
    alternated over 6 rounds, ratios of minimum times; a shared machine): spatial sizes at
    run time ran the ResNet-50 stem's max pool 3x3/2 mb32ic64ih112 forward 1.14x (nhwc) and
    1.09x (nchw) the baked time, backward 1.11x and 1.30x, avg 3x3/1 mb32ic64ih56 nhwc 1.10x,
    with the divisions by run-time sizes already done by reciprocals. The same kernels with
    constants in place of the run-time strides ran within noise of the baked ones (nhwc
    forward: median per-round ratio 1.01), so the cost is the strides in every tap's
    address. The minibatch alone enters no address (rows run image after image), and where
    an image's rows are whole work-groups (ResNet-50's pools) the kernel's code is the baked
    kernel's: within noise of it (ratios of minimum times 0.81-1.08)."""
    return False
