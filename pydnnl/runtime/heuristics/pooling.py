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
    only the minibatch. CPUs: the spatial sizes (one program per pooling class across image
    sizes; nchw's width still baked, :func:`runtime_lane_dim`). GPUs: the minibatch only, from
    a measurement of the run-time form as it was before the workspace shared dst's stride
    arguments and the taps were addressed from the window's first one (H200, NVIDIA's
    OpenCL, nchw max 3x3/2 mb32ic64ih112 forward, kernel minimum of 20 runs, twice: spatial
    sizes at run time 0.0507-0.0509 ms, the minibatch only 0.0452-0.0454 ms, the baked kernel
    0.0453-0.0455); to be measured again.

    Measured on the 2-core AVX-512 Xeon (Intel's runtime, shared with another job; baked and
    run-time primitives in one process, alternated over 12 rounds, minimum of 8 runs per
    round; two more baked primitives in the same rounds give the noise floor, since a
    primitive's buffers alone moved its time by up to 8%): run-time time / the baked
    primitives' range of minimum times, max 3x3/2 mb32ic64ih112: nhwc forward 3.74 ms / 3.54-
    3.64, nchw forward 10.72 / 10.50-11.20, nhwc backward 8.95 / 8.06-9.53, nchw backward 12.37
    / 12.20-12.81; avg (exclude padding) 3x3/1 mb32ic64ih56 nhwc forward 1.89 / 1.71-1.85, nchw
    backward 10.43 / 11.85-12.11. Before three changes (the workspace's and a same-shape
    dst's strides sharing the arguments of dst's and src's, so the compiler shares their
    address arithmetic as in the baked kernel; the forward's taps inside the source addressed
    from the window's first tap) the run-time form ran these 1.05-1.14x the baked time
    (nhwc backward 1.07x with the workspace's own stride arguments, 1.00x sharing dst's).
    Not recovered: avg (exclude padding) 3x3/2 mb16ic64ih128 nhwc forward (benchmarks/
    primitives/large.txt), run-time 1.76-1.79 ms against the baked 1.64-1.72 (1.04-1.07x; the
    same kernel with every size a constant but the row offset and the right edge's test still
    1.02-1.03x, with constant divisions by its power-of-two widths 1.04x: no single cause)."""
    return not info.is_gpu
