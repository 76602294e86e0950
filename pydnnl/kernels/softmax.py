"""OpenCL C generators of the softmax kernels (forward and backward, accurate and log).

A problem is folded first (:func:`~pydnnl.kernels.reduction.fold_dims`): the softmax axis
stays one dim, the other dims ("rows") merge where they lie back to back in every tensor.
Two shapes of kernel, both numerically stable (the row maximum is subtracted before ``exp``):

- **row**: one work-group of ``wg`` work-items (a power of two) per softmax row; work-items
  stride along the axis (coalesced where the axis is innermost in memory) and combine their
  maxima and sums in local memory. Forward reads the row three times (max, sum of
  exponentials, output) and backward twice; a row is small, so the re-reads come from cache.
- **strided**: one work-item per row walking the axis, neighbouring work-items on
  neighbouring positions of the rows' innermost dim (coalesced where the axis is an outer
  dim: ``nchw`` with axis 1).

Forward ``(src, dst)``; backward ``(dst, diff_dst, diff_src)``. Each work-item reads and
writes only its own elements once the row maximum is known, so ``dst`` may be ``src`` (and
``diff_src`` ``diff_dst``) when their layouts agree. Pure: no engine, no argument maps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .reduction import decompose, offset, tree
from .source import KernelSource


@dataclass(frozen=True)
class SoftmaxProblem:
    """Softmax over folded ``dims`` along ``axis`` (an index into ``dims``); ``layouts`` in
    argument order (see :func:`arg_names`)."""

    log: bool
    backward: bool
    dims: tuple[int, ...]
    axis: int
    layouts: tuple
    variant: str = "row"
    wg: int = 64

    @property
    def rows(self) -> int:
        return math.prod(v for d, v in enumerate(self.dims) if d != self.axis)


def arg_names(backward: bool) -> tuple[str, ...]:
    """The kernel's buffer arguments, in order."""
    return ("dst", "diff_dst", "diff_src") if backward else ("src", "dst")


def kernel_name(p: SoftmaxProblem) -> str:
    return f"pydnnl_softmax_{'bwd' if p.backward else 'fwd'}_{p.variant}"


def build_softmax(p: SoftmaxProblem) -> KernelSource:
    """The kernel of ``p`` (see the module docstring)."""
    if p.variant not in ("row", "strided"):
        raise ValueError(f"softmax kernel: unknown variant {p.variant!r}")
    nd = len(p.dims)
    rows_d = [d for d in range(nd) if d != p.axis]
    names = {d: f"i{d}" for d in rows_d}
    C, L, row = p.dims[p.axis], p.wg, p.variant == "row"
    names_t = arg_names(p.backward)
    code = decompose("row", [p.dims[d] for d in rows_d], [names[d] for d in rows_d])
    bases, at = [], {}
    for n, lay in zip(names_t, p.layouts):
        bases.append(f"const int b_{n} = {offset(lay, names)};")
        at[n] = f"{n}[b_{n} + {offset(lay, {p.axis: 'c'}, with_base=False)}]"
    loop = f"for (int c = l; c < {C}; c += {L})" if row else f"for (int c = 0; c < {C}; ++c)"

    def reduce_(combine: str, var: str) -> str:
        """Make ``var`` the row-wide result (the row kernel combines its work-items)."""
        if not row:
            return ""
        return (f"\n    red[l] = {var};\n    barrier(CLK_LOCAL_MEM_FENCE);{tree(L, combine)}"
                f"\n    {var} = red[0];\n    barrier(CLK_LOCAL_MEM_FENCE);")

    if not p.backward:
        x, y = at["src"], at["dst"]
        body = f"""
    float m = -INFINITY;
    {loop} m = fmax(m, {x});{reduce_("fmax({a}, {b})", "m")}
    float s = 0.0f;"""
        if p.log:
            body += f"""
    {loop} s += exp({x} - m);{reduce_("{a} + {b}", "s")}
    const float t = log(s);
    {loop} {y} = ({x} - m) - t;"""
        else:  # dst holds the exponentials until the last pass scales them (one exp each)
            body += f"""
    {loop} {{ const float e = exp({x} - m); {y} = e; s += e; }}{reduce_("{a} + {b}", "s")}
    const float r = 1.0f / s;
    {loop} {y} *= r;"""
    else:
        y, dy, dx = at["dst"], at["diff_dst"], at["diff_src"]
        if p.log:
            body = f"""
    float s = 0.0f;
    {loop} s += {dy};{reduce_("{a} + {b}", "s")}
    {loop} {dx} = {dy} - exp({y}) * s;"""
        else:
            body = f"""
    float s = 0.0f;
    {loop} s += {dy} * {y};{reduce_("{a} + {b}", "s")}
    {loop} {{ const float yv = {y}; {dx} = yv * ({dy} - s); }}"""
    args = ", ".join(f"__global {'float' if k == len(names_t) - 1 else 'const float'} *{n}"
                     for k, n in enumerate(names_t))
    rows = p.rows
    if row:
        head = f"""
    __local float red[{L}];
    const int l = get_local_id(0);
    const int row = get_group_id(0);"""
        attr = f"__attribute__((reqd_work_group_size({L}, 1, 1))) "
        gsize = L * rows
    else:
        head = f"""
    const int row = get_global_id(0);
    if (row >= {rows}) return;"""
        attr = ""
        gsize = -(-rows // L) * L
    name = kernel_name(p)
    src = f"""
__kernel void {attr}{name}({args})
{{{head}
    {code}
    {" ".join(bases)}{body}
}}
"""
    return KernelSource(name, src, (gsize,), (L,), names_t)
