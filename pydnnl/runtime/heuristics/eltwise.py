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


def runtime_count(info, alg, whole: bool = False) -> bool:
    """Whether the flat kernel takes its element count at run time (one program for every
    shape of its class) rather than baked. ``whole``: the count is a whole number of
    work-group blocks; that class's kernel checks no bound, so its code is the baked
    kernel's (H200, 32x64x112x112 forward, minimum of 30 kernel runs: relu baked 0.0524 ms,
    run-time count 0.0586, whole blocks 0.0512; gelu_erf 0.0543 / 0.0730 / 0.0541). Other
    counts: GPUs take them at run time all the same (a bound check per unrolled step costs
    the stream 10-35% but saves a compile per shape); CPUs only for the piecewise-linear
    algorithms: the run-time count's guard ``i < nelems`` costs the others their vectorised
    transcendental calls. AVX-512 Xeon (Intel's runtime), 4x512x768, forward kernel medians
    run-time / baked: relu 1.03 (min 1.01), gelu_erf 1.26, gelu_tanh 1.35, tanh 1.28,
    logistic 1.37, exp 1.21, swish 1.34, elu 1.23."""
    from ...constants import algorithm as A
    from ...kernels.eltwise_ops import base_algorithm

    if whole or (info is not None and info.is_gpu):
        return True
    return base_algorithm(alg) in (A.eltwise_relu, A.eltwise_abs, A.eltwise_linear,
                                   A.eltwise_clip, A.eltwise_clip_v2, A.eltwise_hardsigmoid,
                                   A.eltwise_hardswish, A.eltwise_square, A.eltwise_round)
