"""Device rules of the reorder family: when one program per layout class (every size an
argument, :mod:`~pydnnl.kernels.reorder_strided`) replaces a program per shape."""
from __future__ import annotations

# The strided program saves a kernel's generation and build per new shape (an RNN's staging
# copies and quantizations of each batch and channel count, 3-10 ms of loopy plus the build)
# but walks its indices at run time: on the CPU (2-core AMD EPYC, Intel's runtime, kernel
# ms, per-shape program -> strided) a 64 x 512 transposition ran 0.118 -> 0.113, while large
# copies with a unit innermost stride lost: 50x64x512 4.1 -> 8.9, 3x64x2048 (abc -> bac)
# 0.50 -> 1.75, 64x256x56x56 (nchw -> nhwc) 109 -> 288. Up to 64K elements it takes them
# (GPUs unmeasured: their launches cost more than such a reorder moves).
STRIDED_MAX_ELEMS = 1 << 16


def strided_reorder(info, elems: int) -> bool:
    """Whether a plain reorder of ``elems`` elements takes the strided program."""
    return 0 < elems <= STRIDED_MAX_ELEMS
