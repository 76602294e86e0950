"""OpenCL source of the direct convolution kernels, written without loopy.

The direct solver serves the problems the GEMM-based ones do not take or do not win (groups,
depthwise, odd strides and tails); oneDNN's convolution CI list asked for 214 of its kernels in
one run, and loopy spent about 0.4 s generating each (the direct plans took 89 of the run's 226
s). The printer takes the same index expressions
(:func:`pydnnl.kernels.conv_direct.direct_spec`) and writes them as C: per work-item and tile
entry an accumulator summed over the taps in loopy's loop order (``acc = acc + term``), then
bias and post-ops in one store, with loopy's kernel name, argument names, work-group size and
launch grid. Index arithmetic is printed as given (C's ``/`` and ``%`` on non-negative values),
less what loopy's range analysis removes (:func:`simplify`: a depthwise layer's image and group
indices cost divisions per work-item without it, 4-12% of its forward time). Kernel times
against loopy's on MobileNet's depthwise layers (2-core EPYC, interleaved launches): forward
0.93-1.03x, backward weights 0.83-0.89x, stride-1 backward data 0.99-1.02x. Returns None where
it does not apply (register tiles along the width, strided backward data):
:func:`pydnnl.kernels.conv_direct.build_direct` then uses loopy.
"""
from __future__ import annotations

import re

import numpy as np

from .conv_common import c_float, clamp_helper, postop_helpers, rt_clamp_helper
from .printing import c_size, kernel_head
from .sizevars import is_var
from .source import KernelSource

_OPS = {"FloorDiv": "/", "Remainder": "%"}


def cexpr(e) -> str:
    """C of a pymbolic expression of the direct kernels (indices, loads, float arithmetic)."""
    from pymbolic import primitives as P

    c = cexpr

    if isinstance(e, (bool, np.bool_)):
        return "1" if e else "0"
    if isinstance(e, (int, np.integer)):
        return str(int(e)) if e >= 0 else f"({int(e)})"
    if isinstance(e, (float, np.floating)):
        return c_float(float(e))
    if isinstance(e, P.Variable):
        return e.name
    if isinstance(e, P.Subscript):
        idx = e.index if not isinstance(e.index, tuple) else e.index[0]
        return f"{c(e.aggregate)}[{c(idx)}]"
    if isinstance(e, (P.Sum, P.Product)):
        return "(" + _flat(e) + ")"
    if isinstance(e, P.Quotient):  # (float division: a binary post-op's div)
        return f"({c(e.numerator)} / {c(e.denominator)})"
    if isinstance(e, (P.FloorDiv, P.Remainder)):
        return f"({c(e.numerator)} {_OPS[type(e).__name__]} {c(e.denominator)})"
    if isinstance(e, P.Comparison):
        return f"({c(e.left)} {e.operator} {c(e.right)})"
    if isinstance(e, P.LogicalAnd):
        return "(" + " && ".join(c(x) for x in e.children) + ")"
    if isinstance(e, P.LogicalOr):
        return "(" + " || ".join(c(x) for x in e.children) + ")"
    if isinstance(e, P.LogicalNot):
        return f"(!{c(e.child)})"
    if isinstance(e, P.If):
        return f"({c(e.condition)} ? {c(e.then)} : {c(e.else_)})"
    if isinstance(e, P.Call):
        return f"{c(e.function)}(" + ", ".join(c(a) for a in e.parameters) + ")"
    raise TypeError(f"direct kernel printer: no C for {type(e).__name__}")


def simplify(e, extents: dict):
    """``e`` with the index arithmetic loopy's range analysis would remove: integer zeros in
    sums, ones in products, divisions and remainders by 1, and ``v // c`` (``v % c``) of a
    launch or loop index ``v`` whose constant extent is at most ``c`` (0, ``v``): a
    depthwise layer's image and group indices otherwise cost divisions per work-item."""
    from pymbolic import primitives as P
    from pymbolic.mapper import IdentityMapper

    def small(v, c) -> bool:
        ext = extents.get(v.name) if isinstance(v, P.Variable) else None
        return isinstance(c, (int, np.integer)) and ext is not None and not is_var(ext) \
            and int(ext) <= int(c)

    def is_int(x, value) -> bool:
        return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x == value

    class _Simplify(IdentityMapper):
        def map_sum(self, e):
            kids = [c for c in (self.rec(c) for c in e.children) if not is_int(c, 0)]
            return 0 if not kids else kids[0] if len(kids) == 1 else P.Sum(tuple(kids))

        def map_product(self, e):
            kids = [self.rec(c) for c in e.children]
            if any(is_int(c, 0) for c in kids):
                return 0
            kids = [c for c in kids if not is_int(c, 1)]
            return 1 if not kids else kids[0] if len(kids) == 1 else P.Product(tuple(kids))

        def map_floor_div(self, e):
            n, d = self.rec(e.numerator), self.rec(e.denominator)
            if is_int(d, 1):
                return n
            if is_int(n, 0) or small(n, d):
                return 0
            return P.FloorDiv(n, d)

        def map_remainder(self, e):
            n, d = self.rec(e.numerator), self.rec(e.denominator)
            if is_int(d, 1) or is_int(n, 0):
                return 0
            if small(n, d):
                return n
            return P.Remainder(n, d)

    return _Simplify()(e)


def _flat(e) -> str:
    """The terms of a sum (factors of a product) joined as loopy prints them: a nested sum
    inside a sum (product inside a product) without parentheses, so C adds (multiplies) left
    to right in loopy's order (a sum post-op's prior term, then the sum and the bias)."""
    op = " + " if type(e).__name__ == "Sum" else " * "
    return op.join(_flat(c) if type(c) is type(e) else cexpr(c) for c in e.children)


def _param(spec, idx: str) -> str:
    from .post_ops import _C_TYPE

    name, n = spec[0], spec[1]
    if n is None:
        return f"{idx} const {name}"
    # (a binary post-op's operand is stored in its own type)
    ctype = _C_TYPE[spec[4]] if len(spec) > 4 else "float"
    const = "" if spec[2] else "const "
    return f"__global {ctype} {const}*__restrict__ {name}"


def direct_source(p, params, guards=None) -> KernelSource | None:
    """The direct kernel of ``p`` (:func:`pydnnl.kernels.conv_direct.build_direct`'s
    arguments) as C text, or None where the printer does not cover it."""
    from pymbolic import var
    from pymbolic.mapper.substitutor import substitute

    from .conv_direct import direct_spec

    if params.wtile > 1:
        return None
    if p.kind == "bwd_d" and any(s > 1 for s in p.strides):
        # the output positions' divisions of possibly negative values: loopy's kernel ran
        # 5-7% faster on MobileNet's stride-2 depthwise layers (2-core EPYC, interleaved)
        return None
    sp = direct_spec(p, params, guards)
    idx = "long" if params.index64 else "int"
    T = int(sp.ranges["t"])
    fast, W = sp.fast, sp.fast_size
    runtime = is_var(W)
    wg = max(1, params.wg if runtime else min(params.wg, int(W)))
    axes = ["q"] if fast == "x" else ["r", "q"]

    body = [f"#define lid(N) (({idx}) get_local_id(N))",
            f"#define gid(N) (({idx}) get_group_id(N))", ""]
    code = []
    if runtime:
        code.append(f"const {idx} own = gid(0) * {wg};")
        code.append(f"const {idx} {fast} = (own < {cexpr(W)} - {wg} ? own : {cexpr(W)} - {wg})"
                    " + lid(0);")
    else:
        code.append(f"const {idx} {fast} = gid(0) * {wg} + lid(0);")
    for a, ax in zip(axes, (1, 2)):
        code.append(f"const {idx} {a} = gid({ax});")
    # runs only where every launch extent is non-empty and the lane is inside the width
    conds = [] if runtime or int(W) % wg == 0 else [f"{fast} < {int(W)}"]
    for a in axes:
        if is_var(sp.ranges[a]):
            conds.append(f"{a} < {cexpr(sp.ranges[a])}")
    for r in sp.red:
        if is_var(sp.ranges[r]):
            conds.append(f"{cexpr(sp.ranges[r])} > 0")
    inner = []
    acc = [f"acc[{t}]" if T > 1 else "acc" for t in range(T)]
    inner.append(f"float acc[{T}];" if T > 1 else "float acc;")
    inner += [f"{a} = 0.0f;" for a in acc]
    # a sum over one value (a depthwise layer's channel) is no loop, as loopy prints it
    ones = [r for r in sp.red if not is_var(sp.ranges[r]) and int(sp.ranges[r]) == 1]
    loops = [r for r in sp.red if r not in ones]
    text = "".join(f"{'  ' * d}for ({idx} {r} = 0; {r} < {cexpr(sp.ranges[r])}; ++{r})\n"
                   for d, r in enumerate(loops))
    ind = "  " * len(loops)
    ext = {k: v for k, v in sp.ranges.items() if k != "t"}
    terms = [simplify(substitute(sp.term, {"t": t, **{r: 0 for r in ones}}), ext)
             for t in range(T)]
    sums = "".join(f"{ind}  {a} = {a} + {cexpr(term)};\n" for a, term in zip(acc, terms))
    inner.append(text + ind + "{\n" + sums + ind + "}")
    stores = []
    for t in range(T):
        at = simplify(substitute(sp.assignee, {"t": t}), ext)
        value = simplify(substitute(sp.rest(var("acc")[t] if T > 1 else var("acc")),
                                    {"t": t}), ext)
        stores.append(f"{cexpr(at)} = {cexpr(value)};")
    if runtime:  # the last group's first lanes computed points of the group before
        stores = [f"if ({fast} >= own)", "{"] + ["  " + s for s in stores] + ["}"]
    inner += stores
    block = "\n".join("  " + ln for x in inner for ln in x.splitlines())
    text_body = "\n".join(code) + "\n"
    if conds:
        text_body += "if (" + " && ".join(conds) + ")\n{\n" + block + "\n}\n"
    else:
        text_body += "{\n" + block + "\n}\n"

    helpers = [h[1] for h in postop_helpers(p.post_ops)]
    for name in sorted(set(_clamps(text_body))):
        hi = -1 if name == "pd_clamp_idx" else int(name.rsplit("_", 1)[1])
        helpers.append(clamp_helper(hi)[1])
    if "pd_clamp_rt(" in text_body:
        helpers.append(rt_clamp_helper()[1])

    extents = [sp.ranges[a] for a in axes]
    # the size arguments the code or the grid reads (loopy leaves the others out)
    used = text_body + " ".join(str(x) for x in [W, *extents] if is_var(x))
    sizes = [n for n in sorted(_size_names(p, sp)) if re.search(rf"\b{n}\b", used)]
    specs = list(sp.arg_specs) + [(n, None) for n in sizes]
    head = kernel_head(sp.name, (wg,), [_param(s, "long") for s in specs])
    text = "\n".join(body) + "\n" + "".join(h + "\n" for h in helpers) + "\n" + head \
        + _indent(text_body) + "}\n"
    if runtime:
        g0 = f"(({wg - 1} + {c_size(W)}) // {wg}) * {wg}"
    else:
        g0 = str(-(-int(W) // wg) * wg)
    if runtime or any(is_var(x) for x in extents):
        grid = (g0, *[_grid(x) for x in extents])
        return KernelSource(sp.name, text, None, (wg,) + (1,) * len(axes),
                            tuple(s[0] for s in specs), grid=grid)
    return KernelSource(sp.name, text, (int(g0), *[int(x) for x in extents]),
                        (wg,) + (1,) * len(axes), tuple(s[0] for s in specs))


def _grid(x) -> str:
    return str(x) if is_var(x) else str(int(x))


def _indent(text: str) -> str:
    return "".join("  " + ln if ln.strip() else ln for ln in text.splitlines(True))


def _clamps(text: str) -> list[str]:
    return re.findall(r"(pd_clamp_idx(?:_\d+)?)\(", text)


def _size_names(p, sp) -> set:
    """The size variables the kernel reads (as loopy's ``rt_value_args`` lists them)."""
    from .sizevars import free_vars

    return set(free_vars(p)) | set(free_vars(sp.ranges))

