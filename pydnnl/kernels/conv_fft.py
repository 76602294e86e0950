"""Loopy generator of the FFT line passes of the FFT convolution solver.

A multi-dimensional transform is a sequence of passes, one per spatial dimension; in a pass
every work-item transforms one line of ``L`` complex values with straight-line code
(mixed-radix Cooley-Tukey, radices 4, 2, 3, 5, then a direct DFT for other primes, all
twiddles compile-time constants). What is known when the kernel is generated is folded away:
the zeros of padding (only the positions listed in ``in_pos`` are loaded), imaginary parts
of real input (``in_real``), outputs nobody stores (only ``out_pos`` are kept, and only the
real parts when ``out_real``), so the same generator gives pruned real-to-half-spectrum and
half-spectrum-to-real transforms.

Where a pass reads and writes is described by the problem, not hard-wired:

* ``("tensor", layout, nelems, index_map)``: a pydnnl tensor in any layout; ``index_map``
  gives each logical dimension's index as ``((term, coef), ...)`` with ``term`` a line-dimension
  number, ``"p"`` (the load or store counter) or ``"n0"`` (a run-time image offset);
* ``("planar", strides, p_stride, im_off)``: float32 scratch at a run-time offset, the value
  of line ``l`` and counter ``p`` at ``sum(l_i * strides_i) + p * p_stride``, its imaginary
  part ``im_off`` further (``im_off`` 0 for a real store);
* ``("quad", strides, p_stride, (o00, o11, o10, o01), (s11, s10, s01))`` (source only): the
  result of a real GEMM on split complex operands, whose quadrants combine into
  ``re = q00 + s11 q11``, ``im = s10 q10 + s01 q01``.
"""
from __future__ import annotations

import cmath
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .conv_common import (
    INDEX_DTYPE,
    apply_postops,
    decompose,
    finish,
    make_args,
    offset,
    postop_arg_specs,
    split_fast,
)


@dataclass(frozen=True)
class FftPass:
    """One pass: a 1-D DFT of length ``L`` along every line of the grid ``lines``."""

    lines: tuple  # sizes of the line-index dimensions, outermost first (work-items: last)
    L: int
    inverse: bool  # sign +1 in the exponent (no 1/L: use ``scale``)
    in_pos: tuple  # line positions of the loaded values, in load order; others are zero
    in_real: bool  # loaded values are real
    half: bool  # loaded values are bins 0..L/2 of a line with Hermitian symmetry
    out_pos: tuple  # line positions stored, in store order
    out_real: bool  # store real parts only
    src: tuple
    dst: tuple
    scale: float = 1.0
    bias: tuple | None = None  # layout of a bias indexed by the destination's dimension 1
    bias_n: int = 0
    post_ops: tuple = ()
    wg: int = 64
    #: printed kernels (``conv_fft_source``) take the last line index from the local id
    #: where the work-groups tile its dimension (CPUs: ``heuristics.conv.fft_lid_lines``);
    #: loopy finds its own index forms
    lid_lines: bool = False


def fft_factors(n: int) -> list[int]:
    """The radices used for a transform of length ``n`` (4 and 2 first, then 3, 5, primes)."""
    out = []
    while n > 1:
        for r in (4, 2, 3, 5):
            if n % r == 0:
                break
        else:
            r = next(d for d in range(7, n + 1) if n % d == 0)
        out.append(r)
        n //= r
    return out


def good_length(n: int) -> int:
    """Smallest length >= ``n`` whose factors are 2, 3 and 5 (fast straight-line FFTs)."""
    m = max(1, int(n))
    while True:
        k = m
        for p in (2, 3, 5):
            while k % p == 0:
                k //= p
        if k == 1:
            return m
        m += 1


# ---------------------------------------------------------------------------------------------
# symbolic DFT: values are linear combinations {temporary: coefficient} of private temporaries
# ---------------------------------------------------------------------------------------------
_EPS = 1e-12


def _snap(c: float) -> float:
    for v in (0.0, 1.0, -1.0):
        if abs(c - v) < _EPS:
            return v
    return c


def _axpy(*pairs) -> dict:
    """sum of coef * combination."""
    out: dict = {}
    for coef, lc in pairs:
        if coef == 0.0:
            continue
        for name, c in lc.items():
            out[name] = out.get(name, 0.0) + coef * c
    return {k: v for k, v in out.items() if abs(v) > _EPS}


class _Graph:
    """Private temporaries in creation order, each a linear combination of earlier ones."""

    def __init__(self):
        self.defs: list[tuple[str, object]] = []  # (name, combination or load expression)
        self.n = 0

    def new(self, value) -> dict:
        name = f"v{self.n}"
        self.n += 1
        self.defs.append((name, value))
        return {name: 1.0}

    def keep(self, lc: dict) -> dict:
        """A combination as one temporary (unless it already is a single plain one)."""
        if not lc or (len(lc) == 1 and next(iter(lc.values())) == 1.0):
            return lc
        return self.new(lc)


def _twiddle(g: _Graph, z, w: complex):
    re, im = z
    c, s = _snap(w.real), _snap(w.imag)
    if (c, s) == (1.0, 0.0):
        return z
    out_re = _axpy((c, re), (-s, im))
    out_im = _axpy((c, im), (s, re))
    if c != 0.0 and s != 0.0:  # a genuine multiply: shared by r outputs, keep it
        return g.keep(out_re), g.keep(out_im)
    return out_re, out_im


def _dft(g: _Graph, vals: list, sign: int) -> list:
    n = len(vals)
    if n == 1:
        return vals
    r = fft_factors(n)[0]
    m = n // r
    subs = [_dft(g, vals[j::r], sign) for j in range(r)]
    out = [None] * n
    for q in range(m):
        t = [_twiddle(g, subs[j][q], cmath.exp(sign * 2j * cmath.pi * j * q / n))
             for j in range(r)]
        for ll in range(r):
            re_terms, im_terms = [], []
            for j in range(r):
                w = cmath.exp(sign * 2j * cmath.pi * ((j * ll) % r) / r)
                c, s = _snap(w.real), _snap(w.imag)
                re_terms += [(c, t[j][0]), (-s, t[j][1])]
                im_terms += [(c, t[j][1]), (s, t[j][0])]
            out[q + ll * m] = (_axpy(*re_terms), _axpy(*im_terms))
    # each output of this level feeds the next one several times: keep it as a temporary
    return [(g.keep(a), g.keep(b)) for a, b in out]


def _expr(lc: dict):
    from pymbolic import var

    expr = None
    for name, c in lc.items():
        v = var(name)
        term = v if c == 1.0 else (-v if c == -1.0 else np.float32(c) * v)
        if expr is None:
            expr = term
        elif c == -1.0:
            expr = expr - v
        else:
            expr = expr + term
    return expr if expr is not None else np.float32(0)


# ---------------------------------------------------------------------------------------------
# addressing
# ---------------------------------------------------------------------------------------------
def _index(term_list, line, p):
    from pymbolic import var

    expr = 0
    for term, coef in term_list:
        v = p if term == "p" else (var("n0") if term == "n0" else line[term])
        expr = expr + (v if coef == 1 else coef * v)
    return expr


def _linear(strides, p_stride, line, p):
    expr = 0
    for s, v in zip(strides, line):
        if s:
            expr = expr + (v if s == 1 else s * v)
    if p_stride and p:
        expr = expr + p * p_stride
    return expr


def _uses_n0(spec) -> bool:
    return spec[0] == "tensor" and any(t == "n0" for dim in spec[3] for t, _ in dim)


class FftProgram(NamedTuple):
    """A pass as straight-line code over work-item ``f`` (< ``total``): private float
    temporaries ``(name, expression)`` in order, then the stores ``(address, value)``
    (pymbolic); ``specs``: the arguments (:func:`~.conv_common.make_args`), ``name``: the
    kernel's. Both the loopy kernel and the printed one (``conv_fft_source``) are made of it."""

    total: int
    temps: list
    stores: list
    specs: list
    name: str
    #: with ``named_lines``: the line indices ``(name, expression of f)`` the program's
    #: expressions name instead of spelling them out
    lines: list = []


def fft_program(p: FftPass, named_lines: bool = False) -> FftProgram:
    """The straight-line program of pass ``p``; ``named_lines``: the line indices as
    variables of their own (``FftProgram.lines``), computed once per work-item."""
    from pymbolic import var

    total = int(np.prod(p.lines)) if p.lines else 1
    f = var("f")
    line = decompose(f, list(p.lines)) if p.lines else []
    lines = []
    if named_lines:
        lines = [(f"pd_l{i}", e) for i, e in enumerate(line)]
        line = [var(name) for name, _ in lines]
    g = _Graph()

    # -- loads ------------------------------------------------------------------------------
    src = p.src
    loads: list = []  # per loaded value: (re expression, im expression or None)
    for t, _pos in enumerate(p.in_pos):
        if src[0] == "tensor":
            at = var("inp")[offset(src[1], [_index(d, line, t) for d in src[3]])]
            loads.append((at, None))
        elif src[0] == "planar":
            o = var("in_off") + _linear(src[1], src[2], line, t)
            loads.append((var("inp")[o], None if p.in_real else var("inp")[o + src[3]]))
        elif src[0] == "quad":
            o = var("in_off") + _linear(src[1], src[2], line, t)
            (o00, o11, o10, o01), (s11, s10, s01) = src[3], src[4]
            q = [var("inp")[o + k] for k in (o00, o11, o10, o01)]
            loads.append((q[0] + s11 * q[1] if s11 != -1 else q[0] - q[1],
                          (q[2] if s10 == 1 else -q[2]) + (q[3] if s01 == 1 else -q[3])))
        else:
            raise ValueError(f"fft pass: unknown source {src[0]!r}")
    vals: list = [({}, {})] * p.L
    for t, pos in enumerate(p.in_pos):
        re_e, im_e = loads[t]
        re = g.new(re_e)
        im = g.new(im_e) if im_e is not None and not p.in_real else {}
        vals[pos] = (re, im)
    if p.half:
        for pos in range(p.L // 2 + 1, p.L):
            re, im = vals[p.L - pos]
            vals[pos] = (re, _axpy((-1.0, im)))
    spectrum = _dft(g, vals, 1 if p.inverse else -1)

    # -- stores -----------------------------------------------------------------------------
    dst = p.dst
    stores = []  # (address expression, value expression)
    for u, pos in enumerate(p.out_pos):
        re, im = spectrum[pos]
        if dst[0] == "planar":
            o = var("out_off") + _linear(dst[1], dst[2], line, u)
            stores.append((var("out")[o], _scaled(re, p.scale)))
            if not p.out_real:
                stores.append((var("out")[o + dst[3]], _scaled(im, p.scale)))
        elif dst[0] == "tensor":
            idx = [_index(d, line, u) for d in dst[3]]
            at = var("out")[offset(dst[1], idx)]
            value = _scaled(re, p.scale)
            if p.bias is not None:
                value = value + var("bias")[offset(p.bias, [idx[1]])]
            value = apply_postops(value, p.post_ops, at, at=idx)
            stores.append((at, value))
        else:
            raise ValueError(f"fft pass: unknown destination {dst[0]!r}")

    # -- keep only the temporaries the stores reach -----------------------------------------
    need: set = set()
    for _, value in stores:
        need |= _names(value)
    defs = dict(g.defs)
    order = [name for name, _ in g.defs]
    for name in reversed(order):
        if name in need and isinstance(defs[name], dict):
            need |= set(defs[name])
    temps = [(name, _expr(defs[name]) if isinstance(defs[name], dict) else defs[name])
             for name in order if name in need]

    has_sum = any(op[0] == "sum" for op in p.post_ops)
    # run-time offsets (image chunks, scratch regions): no static bounds check
    specs = [("inp", -1, False, True), ("out", -1, True, has_sum)]
    if p.bias is not None:
        specs.append(("bias", p.bias_n, False, True))
    if src[0] != "tensor":
        specs.append(("in_off", None))
    if dst[0] != "tensor":
        specs.append(("out_off", None))
    if _uses_n0(src) or _uses_n0(dst):
        specs.append(("n0", None))
    specs += postop_arg_specs(p.post_ops)
    name = "pydnnl_conv_fft_inv" if p.inverse else "pydnnl_conv_fft_fwd"
    return FftProgram(total, temps, stores, specs, name, lines)


def build_fft_pass(p: FftPass):
    """The pass's kernel: printed without loopy where :mod:`.conv_fft_source` covers it (no
    post-ops), else generated with loopy from the same program."""
    from .conv_fft_source import fft_pass_source

    src = fft_pass_source(p)
    return src if src is not None else build_fft_pass_loopy(p)


def build_fft_pass_loopy(p: FftPass):
    """The pass's kernel generated with loopy."""
    import loopy as lp
    from pymbolic import var

    prog = fft_program(p)
    within = frozenset(["f"])
    need = {name for name, _ in prog.temps}
    insns, temps = [], []
    for name, expr in prog.temps:
        insns.append(lp.Assignment(var(name), expr, within_inames=within, id=name,
                                   depends_on=frozenset(_names(expr) & need)))
        temps.append(lp.TemporaryVariable(name, np.float32, shape=(),
                                          address_space=lp.AddressSpace.PRIVATE))
    stores = prog.stores
    for i, (at, value) in enumerate(stores):
        insns.append(lp.Assignment(at, value, within_inames=within, id=f"st{i}",
                                   depends_on=frozenset(_names(value) & need),
                                   # the stores write different elements
                                   no_sync_with=frozenset([("st*", "any")]) if len(stores) > 1
                                   else frozenset()))
    knl = lp.make_kernel("{[f]: 0 <= f < %d}" % prog.total, insns,
                         make_args(prog.specs) + temps, name=prog.name, lang_version=(2018, 2),
                         target=lp.PyOpenCLTarget(), index_dtype=INDEX_DTYPE,
                         silenced_warnings=["v1_scheduler_fallback"])
    knl = split_fast(knl, "f", prog.total, p.wg)
    return finish(knl, p.post_ops)


def _scaled(lc: dict, scale: float):
    if scale == 1.0:
        return _expr(lc)
    return _expr({k: v * scale for k, v in lc.items()})


def _names(expr) -> set:
    from pymbolic.mapper.dependency import DependencyMapper

    if not hasattr(expr, "__class__") or isinstance(expr, (int, float, np.generic)):
        return set()
    deps = DependencyMapper(include_subscripts=False, include_lookups=False,
                            include_calls=False)(expr)
    return {d.name for d in deps if d.name.startswith("v") and d.name[1:].isdigit()}


__all__ = ["FftPass", "FftProgram", "build_fft_pass", "build_fft_pass_loopy", "fft_factors",
           "fft_program", "good_length"]
