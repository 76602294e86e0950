"""OpenCL source of the one-work-item-per-element transpose and column sum
(:mod:`pydnnl.kernels.reductions`), written without loopy.

After the cell kernels (:mod:`~pydnnl.kernels.rnn_elementwise_source`), these two were the only
loopy kernels of the LSTM 512 training pair's first-ever creation (the weight gradients'
transposed copy and the bias gradient's column sum), so that creation still paid loopy's import
and generation (0.21-0.46 s on the 2-core Xeon at load 2-3). The printers write loopy's text
for them byte for byte with loopy 2025.2 (the same name, arguments, launch grid, statements and
summation order: rows added one by one in order from 0.0f);
``tests/kernels/test_reductions_source.py`` compares the texts and runs both kernels. Declined
(None: loopy keeps them): a single column or a unit row stride (loopy prints those indices in
other shapes); the tiled transpose and the column sum over several row lanes are written in
OpenCL C by :mod:`~pydnnl.kernels.reductions` itself.
"""
from __future__ import annotations

from .printing import float_ptr, kernel_head
from .source import KernelSource

_PRELUDE = ("#define lid(N) ((int) get_local_id(N))\n"
            "#define gid(N) ((int) get_group_id(N))\n\n")
_INTS = ("int const o_off", "int const i_off", "int const nrows")
_ARGS = ("out", "src", "o_off", "i_off", "nrows")


def _lanes(n: int, wg: int) -> tuple[int, str, str]:
    """Work-group width, the lane's offset ``W * gid(0) + lid(0)`` as loopy prints it
    (``gid(0)`` left out for one group), and its bound check ('' where none is needed)."""
    w = min(wg, n)
    at = "lid(0)" if w == n else f"{w} * gid(0) + lid(0)"
    guard = "" if n % w == 0 else f"{n - 1} + -{w} * gid(0) + -1 * lid(0) >= 0"
    return w, at, guard


def transpose_source(p) -> KernelSource | None:
    """:func:`~pydnnl.kernels.reductions.build_transpose_loopy`'s kernel for ``p`` (a
    ``Transpose`` without tiles), or None: work-items along the columns, rows on group axis
    1."""
    if p.tile or p.cols < 2 or p.ld < 2:
        return None
    w, at, guard = _lanes(p.cols, p.wg)
    stmt = (f"out[o_off + (lid(0) + gid(0) * {w}) * nrows + gid(1)] = "
            f"src[{p.ld} * gid(1) + {at} + i_off];\n")
    body = f"  if ({guard})\n    {stmt}" if guard else f"  {stmt}"
    params = [float_ptr("out", False), float_ptr("src", True), *_INTS]
    text = _PRELUDE + kernel_head("pydnnl_transpose", (w, 1), params) + body + "}"
    return KernelSource("pydnnl_transpose", text, None, (w, 1), _ARGS,
                        grid=(str(-(-p.cols // w) * w), "(nrows) * 1"))


def colsum_source(p) -> KernelSource | None:
    """:func:`~pydnnl.kernels.reductions.build_colsum_loopy`'s kernel for ``p`` (a ``ColSum``
    of one row lane), or None: one work-item per column summing the rows in order."""
    if p.row_lanes != 1 or p.width < 2 or p.ld < 2:
        return None
    w, at, guard = _lanes(p.width, p.wg)
    tgt = f"out[{at} + o_off]"
    value = f"{tgt} + acc_r" if p.accumulate else "acc_r"
    cond = "-1 + nrows >= 0" + (f" && {guard}" if guard else "")
    body = ("  float acc_r;\n\n"
            f"  if ({cond})\n  {{\n"
            "    acc_r = 0.0f;\n"
            "    for (int r = 0; r <= -1 + nrows; ++r)\n"
            f"      acc_r = acc_r + src[{p.ld} * r + {at} + i_off];\n"
            f"    {tgt} = {value};\n  }}\n")
    params = [float_ptr("out", False), float_ptr("src", True), *_INTS]
    text = _PRELUDE + kernel_head("pydnnl_colsum", (w,), params) + body + "}"
    return KernelSource("pydnnl_colsum", text, (-(-p.width // w) * w,), (w,), _ARGS)


__all__ = ["colsum_source", "transpose_source"]
