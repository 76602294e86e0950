"""The byte im2col of an int8 convolution: the A matrix of :mod:`pydnnl.kernels.gemm_int8`.

``col[col_off + ((n * G + g) * P + p) * Kf + kf] = src[n, g*ICg + ic, p * stride - pad + tap *
(dil + 1)]`` for output point ``p`` and kernel row ``kf``, which runs ``ic`` major and taps minor
(``ick``, the order of ``goihw`` weights) or taps major (``kic``, ``gohwi`` weights). A
position in the padding holds the src zero point (0 without one; with one per input channel,
that of the tap's channel): the GEMM subtracts ``zp_src`` times each weight column's full sum
(per channel: the sum of ``zp_src[ic] * w``), so a padded tap contributes ``(zp_src -
zp_src) * w = 0``, as oneDNN's reference skips padded taps. The zero point is stored
saturated into src's type (a zero point outside it has no representable real 0).

One work-item per byte of col, ``kf`` fastest (consecutive work-items write consecutive
bytes). Every size is baked; the offsets and the zero point's buffer are arguments.
Pure: text only, no device.

Transposed (``transposed``, an int8 deconvolution): output point ``p`` and tap ``tap`` read the
src position ``i`` with ``i * stride - pad + tap * (dil + 1) = p`` (per spatial dim), the one
whose product the deconvolution adds into ``p``; where no such ``i`` exists (``p + pad - tap *
(dil + 1)`` not a multiple of the stride, or ``i`` outside src) the byte holds the src zero
point, as a padded tap does, so that it cancels in the GEMM. The GEMM then multiplies these
rows by the deconvolution's own ``[OC/G, IC/G * K]`` weights, unflipped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..memory.data_types import data_type
from .source import KernelSource

GENERATOR_VERSION = "conv_im2col_int8-1"


@dataclass(frozen=True)
class Im2colInt8:
    """Sizes and src strides (elements) of one int8 im2col; spatial tuples have 1 to 3
    entries (oneDNN dilation: 0 is dense)."""

    src_dt: int
    mb: int
    groups: int
    icg: int
    src_sp: tuple
    dst_sp: tuple
    kernel: tuple
    strides: tuple
    dilates: tuple
    padding_l: tuple
    s_n: int
    s_c: int
    s_sp: tuple
    kf_order: str = "ick"
    zero_point: bool = False
    #: the zero point buffer holds one per input channel (``zp[g * icg + ic]``), not one
    zp_per_channel: bool = False
    #: a deconvolution's gather (src position from output point and tap), see the module
    transposed: bool = False

    @property
    def P(self) -> int:
        return math.prod(self.dst_sp)

    @property
    def K(self) -> int:
        return math.prod(self.kernel)

    @property
    def kf(self) -> int:
        return self.icg * self.K

    @property
    def col_bytes(self) -> int:
        return self.mb * self.groups * self.P * self.kf


def _pad3(t: tuple, fill: int) -> tuple:
    return (fill,) * (3 - len(t)) + tuple(int(v) for v in t)


def _positions(transposed: bool, isp: tuple, st: tuple, dl: tuple, pl: tuple) -> str:
    """The statements that set ``id, ih, iw`` (the src position of output point ``od, oh, ow``
    and tap ``kd, kh, kw``) and ``inside`` (whether it exists)."""
    names = (("id", "od", "kd"), ("ih", "oh", "kh"), ("iw", "ow", "kw"))
    if not transposed:
        lines = [f"    const long {i} = {o} * {st[d]} - {pl[d]} + {k} * {dl[d] + 1};"
                 for d, (i, o, k) in enumerate(names)]
        cond = [f"{i} >= 0 && {i} < {isp[d]}" for d, (i, _, _) in enumerate(names)]
        return "\n".join(lines) + ("\n    const bool inside = " + cond[0] + " && " + cond[1]
                                   + "\n                        && " + cond[2] + ";\n")
    # t = i * stride: i exists where t is a multiple of the stride (C division truncates
    # toward zero: a negative t either leaves a remainder or gives a negative i)
    lines, cond = [], []
    for d, (i, o, k) in enumerate(names):
        t = f"{o} + {pl[d]} - {k} * {dl[d] + 1}"
        if st[d] == 1:
            lines.append(f"    const long {i} = {t};")
        else:
            lines.append(f"    const long t{i[1]} = {t}, {i} = t{i[1]} / {st[d]};")
            cond.append(f"t{i[1]} - {i} * {st[d]} == 0")
        cond.append(f"{i} >= 0 && {i} < {isp[d]}")
    return "\n".join(lines) + "\n    const bool inside = " + "\n        && ".join(cond) + ";\n"


def build_im2col_int8(p: Im2colInt8) -> KernelSource:
    """The kernel of ``p``: arguments ``src, col, src_off, col_off`` (+ ``zp``, an int
    buffer whose first entry is the src zero point, or its entry ``g * icg + ic`` per
    channel); grid ``(Kf, P, mb * groups)``."""
    dt = data_type(p.src_dt)
    ctype = {data_type.u8: "uchar", data_type.s8: "char"}[dt]
    lo, hi = (0, 255) if dt == data_type.u8 else (-128, 127)
    isp, osp = _pad3(p.src_sp, 1), _pad3(p.dst_sp, 1)
    ks, st = _pad3(p.kernel, 1), _pad3(p.strides, 1)
    dl, pl = _pad3(p.dilates, 0), _pad3(p.padding_l, 0)
    ss = _pad3(p.s_sp, 0)
    K = p.K
    if p.kf_order == "ick":
        split = f"const long ic = kf / {K}, tap = kf - ic * {K};"
    else:
        split = f"const long tap = kf / {p.icg}, ic = kf - tap * {p.icg};"
    zp_at = f"g * {p.icg} + ic" if p.zp_per_channel else "0"
    fill = (f"(({ctype})clamp(zp[{zp_at}], {lo}, {hi}))" if p.zero_point
            else f"(({ctype})0)")
    zp_arg = ", __global const int* restrict zp" if p.zero_point else ""
    src = f"""__kernel void conv_im2col_int8(__global const {ctype}* restrict src,
    __global {ctype}* restrict col, long src_off, long col_off{zp_arg}) {{
    const long kf = get_global_id(0), p = get_global_id(1), ng = get_global_id(2);
    // remainders as differences: a division and its remainder side by side make LLVM emit
    // `freeze`, which Oclgrind's uninitialized-value checker cannot run
    const long n = ng / {p.groups}, g = ng - n * {p.groups};
    {split}
    const long kr = tap / {ks[2]}, kw = tap - kr * {ks[2]};
    const long kd = kr / {ks[1]}, kh = kr - kd * {ks[1]};
    const long orow = p / {osp[2]}, ow = p - orow * {osp[2]};
    const long od = orow / {osp[1]}, oh = orow - od * {osp[1]};
{_positions(p.transposed, isp, st, dl, pl)}    {ctype} v = {fill};
    if (inside)
        v = src[src_off + n * {p.s_n} + (g * {p.icg} + ic) * {p.s_c} + id * {ss[0]}
                + ih * {ss[1]} + iw * {ss[2]}];
    col[col_off + (ng * {p.P} + p) * {p.kf} + kf] = v;
}}
"""
    names = ("src", "col", "src_off", "col_off") + (("zp",) if p.zero_point else ())
    return KernelSource("conv_im2col_int8", src, (p.kf, p.P, p.mb * p.groups), None, names)


__all__ = ["Im2colInt8", "build_im2col_int8", "GENERATOR_VERSION"]
