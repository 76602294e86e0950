"""OpenCL source of the per-step RNN cell kernels, written without loopy.

A first-ever creation of an RNN primitive generated its cell kernels with loopy
(:func:`~pydnnl.kernels.rnn_elementwise.build_elementwise_loopy`,
:func:`~pydnnl.kernels.rnn_elementwise_bwd.build_elementwise_bwd_loopy`): with loopy's import,
0.19 s of LSTM 512 inference's first-ever creation on the 2-core Xeon at load 2 (0.47-0.75 s on
a busier machine; its only loopy kernel). The printers here write the same kernels from the
same cell-spec formulas as a :class:`KernelSource`: the same kernel name, argument names, order
and types (loopy leaves out buffers and offsets a stage does not read, and so do we),
work-group size, launch grid and text. The formulas are printed with loopy's C rules (constants as
float literals, an integer branch of a float ``If`` cast, sums and products parenthesized only
where loopy does, ``x**2`` as ``x * x``), each stage assignment (forward) or ``emit``
(backward) one statement, loads inlined where loopy inlines them, and the element offsets in
loopy's expanded affine order (``gid(0)`` left out where one work-group spans the channels).
With loopy 2025.2 the text is loopy's byte for byte, so the compiled kernels are the same
(statements and expression trees matter beyond the operations: floating-point contraction
happens within one expression). ``tests/kernels/test_rnn_elementwise_source.py`` compares the
texts under that loopy and, under any, the results of both kernels on random data.

Covered: every cell kind's forward stages (peephole, cell-state clip, every vanilla RNN
activation, with and without stored gates) and backward stages. Declined (None: loopy keeps
them): int8 stages (``quant``), stages with the recurrent GEMM fused in (``fused_k``), and any
formula with a construct the printer does not know (non-finite constants, other functions).
"""
from __future__ import annotations

import numpy as np
import pymbolic.primitives as prim
from pymbolic.mapper.stringifier import (
    PREC_CALL,
    PREC_COMPARISON,
    PREC_LOGICAL_AND,
    PREC_NONE,
    PREC_PRODUCT,
    PREC_SUM,
)

from ..error import unimplemented
from .printing import float_ptr, kernel_head
from .source import KernelSource

# int like loopy's: the offsets are int arguments and the index arithmetic stays 32-bit
_PRELUDE = ("#define lid(N) ((int) get_local_id(N))\n"
            "#define gid(N) ((int) get_group_id(N))\n\n")
_FUNCTIONS = ("exp", "tanh")
_MULTIPLICATIVE = (prim.Quotient, prim.FloorDiv, prim.Remainder)


class _Printer:
    """pymbolic -> OpenCL C as loopy's ``CExpressionToCodeMapper`` prints f32 kernels:
    parentheses only where the enclosing precedence is higher (nested sums and products of
    equal precedence print flat, so they associate to the left as loopy's text does),
    quotients parenthesized inside products, ``x**2`` as ``x * x``. Constants are float
    literals in value context and integers in index context. Records every variable name
    printed (``used``)."""

    def __init__(self, dhc: int, wg: int):
        self.used: set[str] = set()
        self.wg = min(wg, dhc)
        self.one_group = self.wg == dhc  # (loopy then leaves gid(0) out)

    def __call__(self, e, prec: int = PREC_NONE, fl: bool = True) -> str:
        if isinstance(e, (bool, np.bool_)):
            raise unimplemented(f"rnn cell printer: boolean constant {e!r}")
        if isinstance(e, (int, np.integer)):
            return f"{float(e)!r}f" if fl else str(int(e))
        if isinstance(e, (float, np.floating)):
            if isinstance(e, np.floating) and not isinstance(e, np.float32):
                raise unimplemented(f"rnn cell printer: constant of type {type(e).__name__}")
            if not np.isfinite(e) or not fl:
                raise unimplemented(f"rnn cell printer: constant {e!r}")
            return f"{float(e)!r}f"
        if isinstance(e, prim.Variable):
            self.used.add(e.name)
            return e.name
        if isinstance(e, prim.Subscript):
            agg = self(e.aggregate, PREC_CALL + 1, fl)
            return _paren(f"{agg}[{self._index(e.index)}]", prec, PREC_CALL)
        if isinstance(e, prim.Call):
            name = getattr(e.function, "name", None)
            if name not in _FUNCTIONS or len(e.parameters) != 1:
                raise unimplemented(f"rnn cell printer: function {e.function!r}")
            return _paren(f"{name}({self(e.parameters[0], PREC_NONE, fl)})", prec, PREC_CALL)
        if isinstance(e, prim.Sum):
            return _paren(" + ".join(self(c, PREC_SUM, fl) for c in e.children), prec, PREC_SUM)
        if isinstance(e, prim.Product):
            parts = []
            for c in e.children:
                s = self(c, PREC_PRODUCT, fl)
                parts.append(f"({s})" if isinstance(c, _MULTIPLICATIVE) else s)
            return _paren(" * ".join(parts), prec, PREC_PRODUCT)
        if isinstance(e, prim.Quotient) and fl:
            sides = []
            for c in (e.numerator, e.denominator):
                s = self(c, PREC_PRODUCT, fl)
                sides.append(f"({s})" if isinstance(c, (prim.Product,) + _MULTIPLICATIVE)
                             else s)
            return _paren(f"{sides[0]} / {sides[1]}", prec, PREC_PRODUCT)
        if isinstance(e, prim.Power) and isinstance(e.exponent, (int, np.integer)) \
                and 1 <= int(e.exponent) <= 2:
            return self(e.base if int(e.exponent) == 1 else prim.Product((e.base, e.base)),
                        prec, fl)
        if isinstance(e, prim.If):
            # an integer branch beside a float one is cast, as loopy's typed If prints it
            ints = [isinstance(x, (int, np.integer)) for x in (e.then, e.else_)]
            then, else_ = (f"(float) ({self(x, PREC_NONE, fl)})" if i and not all(ints)
                           else self(x, PREC_NONE, fl)
                           for x, i in zip((e.then, e.else_), ints))
            return f"({self(e.condition, PREC_CALL, fl)} ? {then} : {else_})"
        if isinstance(e, prim.Comparison):
            return _paren(f"{self(e.left, PREC_COMPARISON, fl)} {e.operator} "
                          f"{self(e.right, PREC_COMPARISON, fl)}", prec, PREC_COMPARISON)
        if isinstance(e, prim.LogicalAnd):
            return _paren(" && ".join(self(c, PREC_LOGICAL_AND, fl) for c in e.children),
                          prec, PREC_LOGICAL_AND)
        raise unimplemented(f"rnn cell printer: {type(e).__name__} {e!r}")


    def _index(self, e) -> str:
        """An element offset, affine in the batch row ``n``, the channel ``j`` and one
        offset argument, in loopy's expanded order (constant, ``gid(1)``, ``gid(0)``,
        ``lid(0)``, offset): the compilers then see the addresses loopy gives them."""
        from pymbolic.mapper.dependency import DependencyMapper
        from pymbolic.mapper.evaluator import evaluate

        names = sorted(v.name for v in DependencyMapper()(e))
        offs = [v for v in names if v not in ("n", "j")]
        if len(offs) > 1:
            raise unimplemented(f"rnn cell printer: index {e} of several offsets")
        self.used.update(names)
        zero = dict.fromkeys(names, 0)
        c0 = evaluate(e, zero)
        coef = {v: evaluate(e, {**zero, v: 1}) - c0 for v in names}
        if evaluate(e, {**zero, **dict.fromkeys(names, 2)}) != c0 + 2 * sum(coef.values()):
            raise unimplemented(f"rnn cell printer: index {e} is not affine")
        terms = [str(int(c0))] if c0 else []
        if coef.get("n"):
            terms.append("gid(1)" if coef["n"] == 1 else f"{int(coef['n'])} * gid(1)")
        if coef.get("j"):
            cj = int(coef["j"])
            if not self.one_group:
                terms.append(f"{cj * self.wg} * gid(0)")
            terms.append("lid(0)" if cj == 1 else f"{cj} * lid(0)")
        terms += [v for v in offs if coef[v] == 1]
        if any(coef[v] != 1 for v in offs):
            raise unimplemented(f"rnn cell printer: index {e} scales its offset")
        return " + ".join(terms) if terms else "0"


def _paren(s: str, enclosing: int, mine: int) -> str:
    return f"({s})" if enclosing > mine else s


def _kernel(name: str, dhc: int, wg: int, bufs, written: set, offsets, temps: list[str],
            lines: list[str], used: set) -> KernelSource:
    """One cell kernel: work-items along the channels (``j``, axis 0, groups of ``wg``),
    batch rows on group axis 1 (``n``); the private values ``temps`` declared first (sorted,
    as loopy does), then the statements ``lines``, guarded where ``wg`` does not divide the
    channels, as loopy's split does."""
    wg = min(wg, dhc)
    bufs = [b for b in bufs if b in used]
    offs = [o for o in offsets if o in used]
    params = ([float_ptr(b, b not in written) for b in bufs]
              + [f"int const {o}" for o in offs] + ["int const batch"])
    ngroups = -(-dhc // wg)
    decl = "".join(f"  float {t};\n" for t in sorted(temps)) + "\n"
    if ngroups * wg != dhc:
        body = (f"  if ({dhc - 1} + -{wg} * gid(0) + -1 * lid(0) >= 0)\n  {{\n"
                + "".join(f"    {line}\n" for line in lines) + "  }\n")
    else:
        body = "".join(f"  {line}\n" for line in lines)
    text = _PRELUDE + kernel_head(name, (wg, 1), params) + decl + body + "}"
    return KernelSource(name, text, None, (wg, 1), (*bufs, *offs, "batch"),
                        grid=(str(ngroups * wg), "(batch) * 1"))


# {{{ forward

def elementwise_source(p) -> KernelSource | None:
    """The forward stage kernel of ``p`` (an ``ElementwiseProblem``) as
    :func:`~pydnnl.kernels.rnn_elementwise.build_elementwise_loopy` generates it, or None
    (int8, a fused recurrent GEMM, a formula the printer does not know)."""
    if p.quant is not None or p.fused_k:
        return None
    try:
        return _forward(p)
    except unimplemented:
        return None


def _forward(p) -> KernelSource:
    from pymbolic import var
    from pymbolic.mapper.substitutor import substitute

    from ..cells import get_cell
    from .rnn_elementwise import (
        OFFSET_ARGS,
        _FunctionInliner,
        stage_buffers,
        stage_input_reads,
        stage_store_targets,
    )

    spec = get_cell(p.cell)
    stages = spec.forward_stages(p.peephole, p.clip is not None)
    stage = stages[p.stage]
    DHC = p.dhc
    # the buffer reads of each input: the loopy generator's expressions
    mapping = stage_input_reads(p)

    pr = _Printer(DHC, p.wg)
    lines: list[str] = []
    temps: list[str] = []
    # earlier stages' gates first, into private values (loopy's loads)
    for name, m in list(mapping.items()):
        if isinstance(m, tuple):
            temps.append(f"v_{name}")
            lines.append(f"v_{name} = {pr(m[1])};")
            mapping[name] = var(f"v_{name}")
    inline = _FunctionInliner(p.activation, p.alpha, p.clip, p.tanh_exp)
    for a in stage.assignments:
        temps.append(f"v_{a.name}")
        lines.append(f"v_{a.name} = {pr(inline(substitute(a.expr, mapping)))};")
        mapping[a.name] = var(f"v_{a.name}")
    written = set()
    for name, target in stage_store_targets(p):
        written.add(target.aggregate.name)
        lines.append(f"{pr(target)} = v_{name};")
    return _kernel(f"rnn_{spec.name}_s{p.stage}", DHC, p.wg, stage_buffers(p), written,
                   OFFSET_ARGS, temps, lines, pr.used)

# }}}


# {{{ backward

def elementwise_bwd_source(p) -> KernelSource | None:
    """The backward stage kernel of ``p`` (a ``BackwardElementwiseProblem``) as
    :func:`~pydnnl.kernels.rnn_elementwise_bwd.build_elementwise_bwd_loopy` generates it
    (the same :func:`~pydnnl.kernels.rnn_elementwise_bwd.stage_ops` sequence), or None."""
    try:
        return _backward(p)
    except unimplemented:
        return None


def _backward(p) -> KernelSource:
    from pymbolic import var

    from ..cells import get_cell
    from .rnn_elementwise_bwd import OFFSET_ARGS, analyze, stage_ops

    spec = get_cell(p.cell)
    pr = _Printer(p.dhc, p.wg)
    lines: list[str] = []
    temps: list[str] = []
    written: set[str] = set()

    def emit(name, expr):
        temps.append(f"t_{name}")
        lines.append(f"t_{name} = {pr(expr)};")
        return var(f"t_{name}")

    def store(target, expr, sid):
        written.add(target.aggregate.name)
        lines.append(f"{pr(target)} = {pr(expr)};")

    stage_ops(p, emit, store)
    bufs = [b for b, _ in analyze(p).buffers]
    return _kernel(f"rnn_bwd_{spec.name}_s{p.stage}", p.dhc, p.wg, bufs, written,
                   OFFSET_ARGS, temps, lines, pr.used)

# }}}


__all__ = ["elementwise_bwd_source", "elementwise_source"]
