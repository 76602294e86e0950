"""Device rules of the binary, sum and concat family: the launch shape of their index-space
kernels (:mod:`pydnnl.kernels.binary`).

One element per work-item in work-groups of WG, as the eltwise family measured best on Intel's
CPU runtime (53-58 GB/s on this 2-core host for work-groups of 128 to 1024, which it vectorizes
across work-items; loops of several elements per work-item defeated the vectorizer) and as GPUs
want for coalesced access (work-groups of 128-256, consecutive work-items on consecutive
addresses).

The rows shape (:func:`pydnnl.kernels.binary.grid`: work-items along the innermost dim, the
outer indices from the work-group id) is used when the innermost collapsed dim fills a
work-group, or is a multiple of ROW_QUANTUM (one AVX-512 vector of f32, half a GPU warp; then a
work-group holds ``WG // inner`` whole rows); otherwise the flat shape, whose work-items find
their position by division by constants.

Measured on Intel's CPU runtime (2-core AMD EPYC, shared with other jobs: minimum of 5
alternating rounds in one process, ms, hand-written kernels over 16M f32):

- per-channel add 16x64x128x128 + 1x64x1x1: rows on a second work-group axis (the former
  shape, broadcast index per work-item) 3.8, one group axis with the broadcast index from the
  group id 2.4-4.5, a plain copy of src0 2.4-4.8 (the last two equal in each round);
- the same copy on a 2-D group grid ran 1.5-2x slower than on a 1-D one in every round, hence
  one group axis for both row shapes;
- concat along the innermost axis (16x64x128x64 twice, one launch per source): rows of 64 as
  64x4 work-groups 8-13, flat with a division per element 28-37, the former one-kernel concat
  (a branch per source per element) 10.1 against a contiguous copy of the same bytes 5.6-6.8.
"""
from __future__ import annotations

# Tried on the 2-core AVX-512 Xeon (Intel's runtime, kernel event times, machine loaded by
# another job: within-run comparisons only) for the per-channel mul 32x256x56x56 * 1x256x1x1
# (its 0.85x of PyTorch, whose 6.6 ms is about 31 GB/s; this kernel about 27) and kept out:
# a 2-D grid (points along axis 0, one row of 3136 per group row, no tail masking) 19-31 ms
# with groups of 64 and 39-58 with 16, against 12-19 for the flat shape; one work-item per
# quarter row in float16 vectors 21-23; non-temporal stores (__builtin_nontemporal_store,
# saving the read for ownership of dst) 13.9-18.4 against 14.4-18.3. The tensor (103 MiB)
# streams from memory and both shapes are near the rate the other job leaves.

WG = 256
ROW_QUANTUM = 16
# buffers per kernel: OpenCL guarantees 1024 bytes of parameters (128 pointers); sums of
# more inputs run in several launches (concats run one launch per source)
MAX_INPUTS = 32


# GPUs: a work-item streams ITEMS_GPU elements WG apart (unrolled, all loads in flight).
# H100 through NVIDIA's OpenCL, relu over 64 MiB (2026-11, GB/s read plus written; the float4
# copy kernel 2711): one element per work-item 1599-2220 for work-groups of 128-1024, two
# 2473-2619, four 2677-2726, eight 2655-2691. CPUs keep one (see above).
ITEMS_GPU = 4


def items(info) -> int:
    """Elements per work-item of the flat and long-row shapes."""
    return ITEMS_GPU if info.is_gpu else 1


def launch(info, dims) -> tuple[int, bool]:
    """(work-group size, rows shape) for an index space ``dims`` (collapsed)."""
    wg = min(WG, info.max_work_group_size)
    inner = dims[-1]
    rows = len(dims) > 1 and (inner >= wg or inner % ROW_QUANTUM == 0)
    return wg, rows


# Concats whose sources are all short rows over the same outer dims (an innermost-axis concat)
# run in one launch whose work-groups own whole dst rows (kernels.concat.ConcatRowsProblem).
# Intel's CPU runtime, 2 x 32 MiB sources of rows of 64 into rows of 128 (hand-written kernels,
# one round, ms): one launch per source 3.97 (64x4 work-groups), 2.99 (64x16); one launch over
# whole dst rows 2.50 (64x4); a contiguous copy of the same bytes 2.19. CPU runtimes take
# work-groups of up to CONCAT_ROWS_LANES_CPU lanes; GPUs keep WG.
CONCAT_ROWS_LANES_CPU = 1024


def concat_rows_per_group(info, inner: int) -> int:
    """Outer rows per work-group of the one-launch concat over rows of at most ``inner``."""
    lanes = WG if info.is_gpu else CONCAT_ROWS_LANES_CPU
    return max(1, min(lanes, info.max_work_group_size) // max(1, inner))


def concat_spans(info) -> bool:
    """Whether a concat of sources that are all long rows over the same outer dims runs in one
    launch (:class:`pydnnl.kernels.concat.ConcatSpansProblem`) instead of one per source: on
    GPUs, where a launch and its ramp-up cost as much as a few microseconds of copying (H100,
    2 x 12.8 MB channel concat, ResNet-sized: one launch per source 34.5 us, PyTorch 19);
    and on CPUs, where the long runs keep the vectorized copy and one launch saves a pass's
    ramp-up and tail (Intel's runtime, 2-core Sapphire Rapids class, shared, 6 interleaved
    rounds, min ms, per source -> one launch: channel concat 16x64x128x128 + 16x32x128x128
    8.9-9.3 -> 7.8-8.5, 32x128x28x28 twice 0.94-1.03 -> 1.00-1.01 (two rounds of the one
    launch at 1.9-2.1, one of per source at 16.6: the machine's noise)). The short-row
    (innermost axis) concat is ConcatRowsProblem's, above."""
    return True


def max_inputs(info) -> int:
    """Source buffers one sum (or one-launch concat) kernel takes."""
    return MAX_INPUTS


VEC_ROW_VALUES = 16384


def vec_rows(info, dims) -> tuple[int, int]:
    """(vector width, rows per work-item) of the vector-row form
    (:class:`pydnnl.kernels.binary.BinaryVecProblem`: one work-item walks whole rows of the
    collapsed space in ``float<vec>`` vectors), ``(0, 0)`` for the index-space kernel. GPUs
    never (their work-items coalesce). CPUs: 16 lanes on Intel's runtime (an AVX-512
    register), 8 on others (PoCL builds no ``float16`` code); rows up to 16 per work-item,
    about VEC_ROW_VALUES values (Intel's runtime pays a fixed cost per work-group).

    Measured on the 2-core AVX-512 Xeon (Intel's runtime, shared machine; both forms built in
    one process, 5 alternating rounds, min ms; in-place add as benchdnn's ``--inplace=true``,
    PyTorch's ``add_`` in the same rounds): per channel 32x256x56x56 + 1x256x1x1 nchw
    9.0 -> 5.5 (torch 5.5), nhwc 11.5 -> 4.7 (torch 9.3); 32x64x56x56 + 1x64x1x1 nchw
    0.58 -> 0.48, nhwc 0.79 -> 0.48 (torch 0.44); row broadcast 16x512x768 + 1x1x768
    0.48 -> 0.48 (torch 0.43). nhwc's rows of 256 channels were one work-group each; nchw's
    rows of 3136 left a partly masked work-group per row. (The quarter-row float16 variant
    noted above was tried on the 2-D grid, not with whole rows per work-item.)"""
    if info.is_gpu or len(dims) < 2:
        return 0, 0
    v = 16 if info.runtime == "intel" else 8
    return v, max(1, min(16, VEC_ROW_VALUES // max(1, int(dims[-1]))))
