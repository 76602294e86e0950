"""Per-channel sums of a channels-last tensor in slices of rows: the first pass of a
convolution's bias gradient (``bias[c] = sum_rows t[row, c]``).

The rows (images times points) are cut into ``nslices`` runs of ``rps`` rows each (the last
runs may be short or empty); a work-item sums one channel of one run, its work-group's
work-items taking consecutive channels, so every load of a work-group is one contiguous
stretch of a row (a vector load on CPUs, a coalesced one on GPUs). The slices' sums land in
``part[part_off + s * channels + c]``; a second pass adds them up. Row and slice counts,
rows per slice and both offsets are run-time values: one program serves every minibatch and
image size.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the most slices (each slice's sums are ``channels`` values of scratchpad, which the second
#: pass reads), and the fewest rows a slice holds on any device
MAX_SLICES = 1024
MIN_ROWS_PER_SLICE = 16


def slice_count(rows: int, per_slice: int = MIN_ROWS_PER_SLICE) -> int:
    """Slices of ``rows`` rows: about ``per_slice`` rows each (a device rule), at most
    :data:`MAX_SLICES`. The scratchpad is reserved for ``slice_count(rows)`` slices, the
    most any device takes, so that its size is a function of the problem alone."""
    return max(1, min(MAX_SLICES, -(-rows // per_slice)))


@dataclass(frozen=True)
class ChannelSlices:
    """``part[part_off + s*channels + c] = sum_{s*rps <= r < min((s+1)*rps, nrows)}
    t[t_off + r*row_stride + c]`` for ``s < nslices``, ``c < channels``."""

    channels: int
    row_stride: int
    wg: int = 16
    #: channels per work-item (1 or 4: float4 loads; channels and row stride multiples of 4)
    vec: int = 1
    #: work-items per slice along the rows (a power of two): each sums every
    #: ``row_lanes``-th row of the slice, and the work-group adds their sums in local memory.
    #: 1: one work-item walks the slice's rows in order (the loopy kernel's form)
    row_lanes: int = 1

    def __post_init__(self):
        if self.vec not in (1, 4) or (self.vec == 4 and (self.channels % 4
                                                          or self.row_stride % 4)):
            raise ValueError(f"ChannelSlices: vec must be 1 or 4 (4 with channels and "
                             f"row_stride multiples of 4), got vec {self.vec}, channels "
                             f"{self.channels}, row_stride {self.row_stride}")
        if self.row_lanes < 1 or self.row_lanes & (self.row_lanes - 1):
            raise ValueError(f"ChannelSlices: row_lanes must be a power of two, got "
                             f"{self.row_lanes}")

    @property
    def wide(self) -> bool:
        """Whether the kernel is the printed wide form (float4 or several row lanes), which
        loopy does not generate."""
        return self.vec > 1 or self.row_lanes > 1


def lanes(channels: int, wg: int) -> int:
    """Work-items per work-group: the largest power of two up to ``wg`` dividing
    ``channels`` (no channel guard then)."""
    w = 1
    while w * 2 <= wg and channels % (w * 2) == 0:
        w *= 2
    return w


def build_channel_slices(p: ChannelSlices):
    """The kernel of ``p``: its source from a printer (:mod:`pydnnl.kernels.copy_source`, no
    loopy import or code generation), the same kernel :func:`build_channel_slices_loopy`
    generates."""
    from .copy_source import channel_slices_source, channel_slices_wide_source

    if p.wide:
        return channel_slices_wide_source(p)
    src = channel_slices_source(p)
    return src if src is not None else build_channel_slices_loopy(p)


def build_channel_slices_loopy(p: ChannelSlices):
    """The loopy kernel of ``p`` (a TranslationUnit); not the wide form."""
    if p.wide:
        raise ValueError("build_channel_slices_loopy: the wide form (vec or row_lanes) is "
                         "printed only (copy_source.channel_slices_wide_source)")
    import loopy as lp
    from loopy.symbolic import Reduction
    from pymbolic import var
    from pymbolic.primitives import Comparison, If

    from .clhelpers import register_helpers
    from .conv_common import RT_CLAMP, rt_clamp_helper

    W = lanes(p.channels, p.wg)
    c = var("cb") * W + var("cl")
    row = var("s") * var("rps") + var("i")
    # the row test is the same for a whole work-group (its lanes are channels); the clamp
    # keeps the address inside t whatever the compiler speculates (see guarded_load)
    val = If(Comparison(row, "<", var("nrows")),
             var("t")[var("t_off") + var(RT_CLAMP)(row, var("nrows") - 1) * p.row_stride + c],
             np.float32(0))
    insn = lp.Assignment(var("part")[var("part_off") + var("s") * p.channels + c],
                         Reduction("sum", ("i",), val),
                         within_inames=frozenset(["cb", "cl", "s"]), id="slice_sum")
    args = [lp.GlobalArg("t", np.float32, shape=None),
            lp.GlobalArg("part", np.float32, shape=None, is_output=True),
            *[lp.ValueArg(n, np.int64)
              for n in ("t_off", "part_off", "nrows", "rps", "nslices")]]
    dom = (f"{{[cb, cl, s, i]: 0 <= cb < {p.channels // W} and 0 <= cl < {W} and "
           f"0 <= s < nslices and 0 <= i < rps}}")
    knl = lp.make_kernel(dom, [insn], args, name="pydnnl_channel_slices",
                         lang_version=(2018, 2), target=lp.PyOpenCLTarget(),
                         index_dtype=np.int64,
                         silenced_warnings=["v1_scheduler_fallback", "write_race(slice_sum)"])
    knl = lp.tag_inames(knl, {"cl": "l.0", "cb": "g.0", "s": "g.1"})
    knl = register_helpers(knl, [rt_clamp_helper()])
    # the helper hides the index from loopy's static bounds check (Oclgrind tests check it)
    return lp.set_options(knl, enforce_array_accesses_within_bounds="no_check")


__all__ = ["ChannelSlices", "build_channel_slices", "build_channel_slices_loopy", "lanes",
           "slice_count"]
