"""Small loopy kernels with run-time offsets: column sums (bias gradients), row sums,
elementwise sums of two buffers and transposed copies."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ColSum:
    """``out[o_off + j] (+)= sum_{r < nrows} src[i_off + r * ld + j]`` for ``j < width``;
    ``nrows`` is a kernel argument (int32): one kernel serves every T and batch."""

    width: int
    ld: int
    accumulate: bool = True
    wg: int = 32
    # work-items per column, each summing every row_lanes-th row, combined in local memory
    # (GPUs: one work-item per column leaves the device nearly idle on a few thousand columns)
    row_lanes: int = 1


@dataclass(frozen=True)
class RowSum:
    """``out[o_off + r] = sum_{j < width} src[i_off + r * ld + j]`` for ``r < rows``."""

    rows: int
    width: int
    ld: int
    wg: int = 32


@dataclass(frozen=True)
class Add2:
    """``out[o_off + i] = a[a_off + i] + b[b_off + i]`` for ``i < count``."""

    count: int
    wg: int = 64


@dataclass(frozen=True)
class Transpose:
    """``out[o_off + c * nrows + r] = src[i_off + r * ld + c]`` for ``r < nrows, c < cols``;
    ``nrows`` is a kernel argument (int32): one kernel serves every T and batch. ``tile``:
    square tiles of that side staged through local memory, so that both the reads and the
    writes are consecutive (OpenCL C); 0: one work-item per element, reads consecutive."""

    cols: int
    ld: int
    wg: int = 16
    tile: int = 0


def _args(lp, names_out, names_in, offsets):
    args = [lp.GlobalArg(n, np.float32, shape=None, is_output=True, is_input=True)
            for n in names_out]
    args += [lp.GlobalArg(n, np.float32, shape=None) for n in names_in]
    args += [lp.ValueArg(o, np.int32) for o in offsets]
    return args


def build_colsum(p: ColSum):
    """The column sum of ``p``: several row lanes in OpenCL C (:func:`_colsum_lanes`), one
    lane printed without loopy where :func:`~pydnnl.kernels.reductions_source.colsum_source`
    covers it, else loopy's."""
    if p.row_lanes > 1:
        return _colsum_lanes(p)
    from .reductions_source import colsum_source

    src = colsum_source(p)
    return src if src is not None else build_colsum_loopy(p)


def build_colsum_loopy(p: ColSum):
    """loopy's kernel of a one-lane column sum (a TranslationUnit)."""
    import loopy as lp
    from loopy.symbolic import Reduction
    from pymbolic import var

    j, r = var("j"), var("r")
    red = Reduction("sum", ("r",), var("src")[var("i_off") + r * p.ld + j])
    tgt = var("out")[var("o_off") + j]
    insn = lp.Assignment(tgt, (tgt + red) if p.accumulate else red, within_inames=frozenset(["j"]))
    knl = lp.make_kernel(f"{{[j, r]: 0 <= j < {p.width} and 0 <= r < nrows}}", [insn],
                         _args(lp, ["out"], ["src"], ["o_off", "i_off", "nrows"]),
                         name="pydnnl_colsum",
                         lang_version=(2018, 2), target=lp.PyOpenCLTarget())
    return lp.split_iname(knl, "j", min(p.wg, p.width), inner_tag="l.0", outer_tag="g.0")


def _colsum_lanes(p: ColSum):
    """The column sum with ``row_lanes`` work-items per column (OpenCL C): work-group
    ``(wg columns, row_lanes)``; lane l sums rows l, l + row_lanes, ...; a local-memory tree
    adds the lanes."""
    from .source import KernelSource

    cw, rl = min(p.wg, p.width), p.row_lanes
    if rl & (rl - 1):
        raise ValueError(f"colsum: row_lanes {rl}: expected a power of two")
    out = "out[o_off + j] + part[0][cj]" if p.accumulate else "part[0][cj]"
    src = "\n".join([
        f"__kernel void __attribute__((reqd_work_group_size({cw}, {rl}, 1)))",
        "pydnnl_colsum_lanes(__global float *out, __global const float *src, int o_off,",
        "                    int i_off, int nrows)",
        "{",
        "  const int cj = get_local_id(0), rl = get_local_id(1);",
        f"  const int j = get_group_id(0) * {cw} + cj;",
        f"  __local float part[{rl}][{cw + 1}];",
        "  float acc = 0.0f;",
        f"  if (j < {p.width}) {{",
        "    const __global float *col = src + i_off + j;",
        "    #pragma unroll 4",
        f"    for (int r = rl; r < nrows; r += {rl}) acc += col[(long)r * {p.ld}];",
        "  }",
        "  part[rl][cj] = acc;",
        f"  for (int h = {rl // 2}; h > 0; h >>= 1) {{",
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        "    if (rl < h) part[rl][cj] += part[rl + h][cj];",
        "  }",
        f"  if (rl == 0 && j < {p.width}) out[o_off + j] = {out};",
        "}",
        ""])
    groups = -(-p.width // cw)
    return KernelSource("pydnnl_colsum_lanes", src, (groups * cw, rl), (cw, rl),
                        ("out", "src", "o_off", "i_off", "nrows"))


def _transpose_tiled(p: Transpose):
    """The transpose in ``tile x tile`` blocks: work-group ``(tile, tile / 4)``; each reads
    its block's rows of src into local memory (rows padded by one float against bank
    conflicts), then writes the block's columns as rows of out."""
    from .source import KernelSource

    t = p.tile
    ty = max(1, t // 4)
    src = "\n".join([
        f"__kernel void __attribute__((reqd_work_group_size({t}, {ty}, 1)))",
        "pydnnl_transpose_tiled(__global float *out, __global const float *src, int o_off,",
        "                       int i_off, int nrows)",
        "{",
        f"  __local float blk[{t}][{t + 1}];",
        "  const int lx = get_local_id(0), ly = get_local_id(1);",
        f"  const int c0 = get_group_id(0) * {t}, r0 = get_group_id(1) * {t};",
        f"  for (int i = ly; i < {t}; i += {ty}) {{",
        "    const int r = r0 + i, c = c0 + lx;",
        f"    if (r < nrows && c < {p.cols}) blk[i][lx] = src[i_off + (long)r * {p.ld} + c];",
        "  }",
        "  barrier(CLK_LOCAL_MEM_FENCE);",
        f"  for (int i = ly; i < {t}; i += {ty}) {{",
        "    const int c = c0 + i, r = r0 + lx;",
        f"    if (r < nrows && c < {p.cols}) out[o_off + (long)c * nrows + r] = blk[lx][i];",
        "  }",
        "}",
        ""])
    return KernelSource("pydnnl_transpose_tiled", src, None, (t, ty),
                        ("out", "src", "o_off", "i_off", "nrows"),
                        grid=(str(-(-p.cols // t) * t), f"((nrows + {t - 1}) // {t}) * {ty}"))


def build_rowsum(p: RowSum):
    import loopy as lp
    from loopy.symbolic import Reduction
    from pymbolic import var

    j, r = var("j"), var("r")
    red = Reduction("sum", ("j",), var("src")[var("i_off") + r * p.ld + j])
    insn = lp.Assignment(var("out")[var("o_off") + r], red, within_inames=frozenset(["r"]))
    knl = lp.make_kernel(f"{{[j, r]: 0 <= j < {p.width} and 0 <= r < {p.rows}}}", [insn],
                         _args(lp, ["out"], ["src"], ["o_off", "i_off"]), name="pydnnl_rowsum",
                         lang_version=(2018, 2), target=lp.PyOpenCLTarget())
    return lp.split_iname(knl, "r", min(p.wg, p.rows), inner_tag="l.0", outer_tag="g.0")


def build_add2(p: Add2):
    import loopy as lp
    from pymbolic import var

    i = var("i")
    insn = lp.Assignment(var("out")[var("o_off") + i],
                         var("a")[var("a_off") + i] + var("b")[var("b_off") + i],
                         within_inames=frozenset(["i"]))
    knl = lp.make_kernel(f"{{[i]: 0 <= i < {p.count}}}", [insn],
                         _args(lp, ["out"], ["a", "b"], ["o_off", "a_off", "b_off"]),
                         name="pydnnl_add2", lang_version=(2018, 2), target=lp.PyOpenCLTarget())
    return lp.split_iname(knl, "i", min(p.wg, p.count), inner_tag="l.0", outer_tag="g.0")


def build_transpose(p: Transpose):
    """The transpose of ``p``: tiled in OpenCL C (:func:`_transpose_tiled`), untiled printed
    without loopy where :func:`~pydnnl.kernels.reductions_source.transpose_source` covers it,
    else loopy's."""
    if p.tile:
        return _transpose_tiled(p)
    from .reductions_source import transpose_source

    src = transpose_source(p)
    return src if src is not None else build_transpose_loopy(p)


def build_transpose_loopy(p: Transpose):
    """loopy's kernel of an untiled transpose (a TranslationUnit)."""
    import loopy as lp
    from pymbolic import var

    r, c = var("r"), var("c")
    insn = lp.Assignment(var("out")[var("o_off") + c * var("nrows") + r],
                         var("src")[var("i_off") + r * p.ld + c],
                         within_inames=frozenset(["r", "c"]))
    knl = lp.make_kernel(f"{{[r, c]: 0 <= r < nrows and 0 <= c < {p.cols}}}", [insn],
                         _args(lp, ["out"], ["src"], ["o_off", "i_off", "nrows"]),
                         name="pydnnl_transpose", lang_version=(2018, 2),
                         target=lp.PyOpenCLTarget())
    knl = lp.split_iname(knl, "c", min(p.wg, p.cols), inner_tag="l.0", outer_tag="g.0")
    return lp.tag_inames(knl, {"r": "g.1"})
