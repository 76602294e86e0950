"""OpenCL source of the direct convolution kernels, written without loopy.

The direct solver serves the problems the GEMM-based ones do not take or do not win (groups,
depthwise, odd strides and tails); oneDNN's convolution CI list asked for 214 of its kernels
in one run, and loopy spent 0.4 s generating each (89 of the run's 226 s). The printer takes
the same index expressions (:func:`pydnnl.kernels.conv_direct.direct_spec`) and writes them
as C: per work-item and tile entry an accumulator summed over the taps in loopy's loop order
(``acc = acc + term``), then bias and post-ops in one store, with loopy's kernel name,
argument names, work-group size and launch grid. Index arithmetic is printed as given (C's
``/`` and ``%``: every quotient and remainder a store or load address depends on is of
non-negative values; a negative one only occurs under a false load condition, whose address
is clamped into the tensor). Returns None where it does not apply (binary post-ops, register
tiles along the width): :func:`pydnnl.kernels.conv_direct.build_direct` then uses loopy.
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
        return f"{cexpr(e.aggregate)}[{cexpr(idx)}]"
    if isinstance(e, (P.Sum, P.Product)):
        return "(" + _flat(e) + ")"
    if isinstance(e, (P.FloorDiv, P.Remainder)):
        return f"({cexpr(e.numerator)} {_OPS[type(e).__name__]} {cexpr(e.denominator)})"
    if isinstance(e, P.Comparison):
        return f"({cexpr(e.left)} {e.operator} {cexpr(e.right)})"
    if isinstance(e, P.LogicalAnd):
        return "(" + " && ".join(cexpr(c) for c in e.children) + ")"
    if isinstance(e, P.LogicalOr):
        return "(" + " || ".join(cexpr(c) for c in e.children) + ")"
    if isinstance(e, P.LogicalNot):
        return f"(!{cexpr(e.child)})"
    if isinstance(e, P.If):
        return f"({cexpr(e.condition)} ? {cexpr(e.then)} : {cexpr(e.else_)})"
    if isinstance(e, P.Call):
        return f"{cexpr(e.function)}(" + ", ".join(cexpr(a) for a in e.parameters) + ")"
    raise TypeError(f"direct kernel printer: no C for {type(e).__name__}")


def _flat(e) -> str:
    """The terms of a sum (factors of a product) joined as loopy prints them: a nested sum
    inside a sum (product inside a product) without parentheses, so C adds (multiplies) left
    to right in loopy's order (a sum post-op's prior term, then the sum and the bias)."""
    op = " + " if type(e).__name__ == "Sum" else " * "
    return op.join(_flat(c) if type(c) is type(e) else cexpr(c) for c in e.children)


def _param(spec, idx: str) -> str:
    name, n = spec[0], spec[1]
    if n is None:
        return f"{idx} const {name}"
    if len(spec) > 4 and np.dtype(spec[4]) != np.float32:
        raise TypeError("direct kernel printer: f32 arrays only")
    const = "" if spec[2] else "const "
    return f"__global float {const}*__restrict__ {name}"


def direct_source(p, params, guards=None) -> KernelSource | None:
    """The direct kernel of ``p`` (:func:`pydnnl.kernels.conv_direct.build_direct`'s
    arguments) as C text, or None where the printer does not cover it."""
    from pymbolic import var
    from pymbolic.mapper.substitutor import substitute

    from .conv_direct import direct_spec
    from .post_ops import has_binary

    if params.wtile > 1 or has_binary(p.post_ops):
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
    loops = ""
    for depth, r in enumerate(sp.red):
        loops += "  " * depth + f"for ({idx} {r} = 0; {r} < {cexpr(sp.ranges[r])}; ++{r})\n"
    ind = "  " * len(sp.red)
    terms = [substitute(sp.term, {"t": t}) for t in range(T)]
    sums = "".join(f"{ind}  {a} = {a} + {cexpr(term)};\n" for a, term in zip(acc, terms))
    inner.append(loops.rstrip("\n") + "\n" + "  " * len(sp.red) + "{\n" + sums
                 + "  " * len(sp.red) + "}")
    stores = []
    for t, a in enumerate(acc):
        at = substitute(sp.assignee, {"t": t})
        value = substitute(sp.rest(var("pd_sum")), {"t": t})
        stores.append(f"{cexpr(at)} = {cexpr(value).replace('pd_sum', a)};")
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

