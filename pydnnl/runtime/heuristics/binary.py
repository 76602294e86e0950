"""Device rules of the binary, sum and concat family: the launch shape of their index-space
kernels (:mod:`pydnnl.kernels.binary`).

One element per work-item in work-groups of WG, as the eltwise family measured best on Intel's
CPU runtime (53-58 GB/s on this 2-core host for work-groups of 128 to 1024, which it vectorizes
across work-items; loops of several elements per work-item defeated the vectorizer) and as GPUs
want for coalesced access. The rows shape (work-items along the innermost dim, no index
division on the fast axis) is used when that dim fills a whole work-group (ROWS_MIN = WG);
shorter rows would make small work-groups, so those problems use the flat shape, whose
divisions by constants cost a few integer operations per element. (On this loaded 2-core host
a per-channel add over 16x64x128x128 channels-last, inner dim 64, ran 11.0 ms flat against
14.6 ms as rows of 64; timings here vary by 2x between runs, so this is a direction, not a
measurement to tune against.)
"""
from __future__ import annotations

WG = 256
ROWS_MIN = WG
# buffers per kernel: OpenCL guarantees 1024 bytes of parameters (128 pointers); sums and
# concats of more inputs run in several launches
MAX_INPUTS = 32


def launch(info, dims) -> tuple[int, bool]:
    """(work-group size, rows shape) for an index space ``dims`` (collapsed)."""
    wg = min(WG, info.max_work_group_size)
    rows = len(dims) > 1 and dims[-1] >= ROWS_MIN
    return wg, rows


def max_inputs(info) -> int:
    """Source buffers one sum or concat kernel takes."""
    return MAX_INPUTS
