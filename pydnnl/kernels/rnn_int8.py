"""Loopy generators of the int8 RNN's small kernels (oneDNN's u8/s8 inference, emulated: the
quantized values live in f32 buffers as integers, which f32 holds exactly).

- :func:`build_quantize`: ``x = clamp(rint(x * scale + shift), lo, hi)`` in place over a flat
  range (f32 initial states; the zero state, which quantizes to ``rint(shift)``).
- :func:`build_finish`: outputs in place: the saturated sum of two directions' quantized
  values (bidirectional_sum), then, for f32 outputs, ``(x - k * shift) / scale`` (k = 2 for
  a sum of two shifted values).
- :func:`build_column_sums`: the data shift's compensation, per execution from the weights:
  ``bias - (sum_k Wl[k, c] + sum_k Wi[k, c]) * shift / (wscale[c] * data_scale)`` for the
  gates, ``sum_k Wp[k, c] * shift`` for the projection.
- :func:`build_proj_requant`: the projection's accumulator in place:
  ``q((acc - comp[c]) / (wscale[c] * data_scale))``.

The formulas follow oneDNN's ``src/cpu/rnn/ref_rnn.cpp`` (``copy_init_iter``,
``copy_res_layer``, ``apply_bias_compensation``) and ``ref_postgemm_lstm_projection.cpp``.
Counts and offsets are run-time arguments; widths and quantization constants are baked.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .rnn_elementwise import quant_helper


@dataclass(frozen=True)
class Quantize:
    """``quant``: (scale, shift, lo, hi), as :class:`~.rnn_elementwise.ElementwiseProblem`."""

    quant: tuple
    wg: int = 64


@dataclass(frozen=True)
class Finish:
    """Saturate to [lo, hi] when ``saturate``; then, when ``dequantize``, ``(x - k * shift) /
    scale``."""

    scale: float
    shift: float
    lo: float
    hi: float
    saturate: bool
    dequantize: bool
    k: int = 1
    wg: int = 64


@dataclass(frozen=True)
class ColumnSums:
    """Sums over k of ``count`` matrices [ka, n] (and [kb, n] when kb > 0), per column c:
    ``base[c] - sums * shift / div[c]`` when ``bias``, else ``sums * shift``."""

    n: int
    ka: int
    kb: int
    shift: float
    bias: bool
    wg: int = 32


@dataclass(frozen=True)
class ProjRequant:
    """``x[r, c] = q((x[r, c] - comp[c]) / div[c])`` over rows of ``n`` values (``comp`` only
    when ``compensated``)."""

    n: int
    quant: tuple
    compensated: bool
    wg: int = 32


def _flat_kernel(name: str, expr_of, wg: int, helpers=()):
    import loopy as lp
    from pymbolic import var

    i = var("i")
    x = var("x")[var("off") + i]
    insn = lp.Assignment(x, expr_of(x), id="s", within_inames=frozenset(["i"]))
    args = [lp.GlobalArg("x", np.float32, shape=None, is_input=True, is_output=True),
            lp.ValueArg("off", np.int32), lp.ValueArg("count", np.int32)]
    knl = lp.make_kernel("{[i]: 0 <= i < count}", [insn], args, name=name,
                         lang_version=(2018, 2), target=lp.PyOpenCLTarget())
    knl = lp.split_iname(knl, "i", wg, inner_tag="l.0", outer_tag="g.0")
    if helpers:
        from .clhelpers import register_helpers

        knl = register_helpers(knl, list(helpers))
    return knl


def build_quantize(p: Quantize):
    """args: x (f32, in place), off, count."""
    from pymbolic import var

    h = quant_helper(p.quant)
    return _flat_kernel("pydnnl_rnn_int8_quantize", lambda x: var(h[0])(x), p.wg, [h])


def build_finish(p: Finish):
    """args: x (f32, in place), off, count."""
    import pymbolic.primitives as prim

    lo, hi = np.float32(p.lo), np.float32(p.hi)

    def expr(x):
        if p.saturate:
            x = prim.If(prim.Comparison(x, "<", lo), lo, prim.If(prim.Comparison(x, ">", hi),
                                                                   hi, x))
        if p.dequantize:
            x = (x - np.float32(p.k * p.shift)) / np.float32(p.scale)
        return x

    return _flat_kernel("pydnnl_rnn_int8_finish", expr, p.wg)


def build_column_sums(p: ColumnSums):
    """args: out, a, [b,] [base, div,] then int32 out_off, a_off, [b_off,] [base_off, div_off,]
    count. Matrix m of a starts at ``a_off + m * ka * n`` (of b likewise), out and base rows
    are ``n`` apart."""
    import loopy as lp
    from pymbolic import var

    m, c, k = var("m"), var("c"), var("k")
    n = p.n
    total = lp.Reduction("sum", "k", var("a")[var("a_off") + (m * p.ka + k) * n + c])
    if p.kb:
        total = total + lp.Reduction("sum", "kk", var("b")[var("b_off")
                                                           + (m * p.kb + var("kk")) * n + c])
    shift = np.float32(p.shift)
    if p.bias:
        val = (var("base")[var("base_off") + m * n + c]
               - total * shift / var("div")[var("div_off") + c])
    else:
        val = total * shift
    insn = lp.Assignment(var("out")[var("out_off") + m * n + c], val, id="s",
                         within_inames=frozenset(["m", "c"]))
    bufs = ["out", "a"] + (["b"] if p.kb else []) + (["base", "div"] if p.bias else [])
    args = [lp.GlobalArg(b, np.float32, shape=None, is_output=b == "out", is_input=b != "out")
            for b in bufs]
    args += [lp.ValueArg(f"{b}_off", np.int32) for b in bufs]
    args.append(lp.ValueArg("count", np.int32))
    dom = (f"{{[m, c, k{', kk' if p.kb else ''}]: 0 <= m < count and 0 <= c < {n} and "
           f"0 <= k < {p.ka}" + (f" and 0 <= kk < {p.kb}}}" if p.kb else "}"))
    knl = lp.make_kernel(dom, [insn], args, name="pydnnl_rnn_int8_colsums",
                         lang_version=(2018, 2), target=lp.PyOpenCLTarget())
    knl = lp.split_iname(knl, "c", min(p.wg, n), inner_tag="l.0", outer_tag="g.0")
    return lp.tag_inames(knl, {"m": "g.1"})


def build_proj_requant(p: ProjRequant):
    """args: x (in place), [comp,] div, then int32 x_off, [comp_off,] div_off, nrows."""
    import loopy as lp
    from pymbolic import var

    r, c = var("r"), var("c")
    h = quant_helper(p.quant)
    x = var("x")[var("x_off") + r * p.n + c]
    acc = x - var("comp")[var("comp_off") + c] if p.compensated else x
    insn = lp.Assignment(x, var(h[0])(acc / var("div")[var("div_off") + c]), id="s",
                         within_inames=frozenset(["r", "c"]))
    bufs = ["x"] + (["comp"] if p.compensated else []) + ["div"]
    args = [lp.GlobalArg(b, np.float32, shape=None, is_output=b == "x", is_input=True)
            for b in bufs]
    args += [lp.ValueArg(f"{b}_off", np.int32) for b in bufs]
    args.append(lp.ValueArg("nrows", np.int32))
    knl = lp.make_kernel(f"{{[r, c]: 0 <= r < nrows and 0 <= c < {p.n}}}", [insn], args,
                         name="pydnnl_rnn_int8_proj_requant", lang_version=(2018, 2),
                         target=lp.PyOpenCLTarget())
    knl = lp.split_iname(knl, "c", min(p.wg, p.n), inner_tag="l.0", outer_tag="g.0")
    knl = lp.tag_inames(knl, {"r": "g.1"})
    from .clhelpers import register_helpers

    return register_helpers(knl, [h])
