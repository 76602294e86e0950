"""Loopy generator of concat kernels: one launch writes a region of dst along the concat axis
from several sources, each element of dst written once and read from the one source that
covers its position on the axis.

The index space is the destination region's, collapsed (:func:`pydnnl.kernels.binary.collapse`
with the axis kept whole), with the launch shapes of :mod:`pydnnl.kernels.binary`. Work-item
``x`` with axis index ``c`` reads source ``k`` where ``ends[k-1] <= c < ends[k]``, at axis index
``c - ends[k-1]`` through that source's own layout (a chain of selects: neighbouring work-items
take the same branch unless the axis is the innermost dim). Concats of more sources than one
kernel takes run as one launch per chunk of sources, each on its own region (``base``).
Pure: no engine, no argument maps.
"""
from __future__ import annotations

from dataclasses import dataclass

from .binary import global_arg, grid, offset, schedule


@dataclass(frozen=True)
class ConcatProblem:
    """Copy sources into ``dst`` along ``axis`` of the (collapsed) index space ``dims``.

    ``dims[axis]`` is the region's extent (the sum of ``extents``, one per source); ``base``
    the region's first index on dst's axis; ``layouts`` / ``sizes`` hold each source's layout
    (over its own extent on the axis) and then dst's, and their storage elements."""

    dims: tuple[int, ...]
    axis: int
    extents: tuple[int, ...]
    base: int
    layouts: tuple
    sizes: tuple[int, ...]
    wg: int = 256
    rows: bool = False


def arg_names(n: int) -> tuple[str, ...]:
    """The kernel's buffer arguments: ``src0 .. src<n-1>, dst``."""
    return tuple(f"src{k}" for k in range(n)) + ("dst",)


def build_concat(p: ConcatProblem):
    """loopy TranslationUnit ``(src0, ..., src<n-1>, dst)``."""
    import loopy as lp
    from pymbolic import var
    from pymbolic.primitives import Comparison, If

    n = len(p.extents)
    if n < 1 or len(p.layouts) != n + 1 or sum(p.extents) != p.dims[p.axis]:
        raise ValueError(f"concat kernel: {n} extents {p.extents} must fill the axis "
                         f"({p.dims[p.axis]}) and come with {n + 1} layouts")
    domain, inames, idx = grid(p.dims, p.rows)
    c = idx[p.axis]
    starts = [sum(p.extents[:k]) for k in range(n)]

    def read(k):
        at = list(idx)
        at[p.axis] = c - starts[k] if starts[k] else c
        return var(f"src{k}")[offset(p.layouts[k], at)]

    value = read(n - 1)
    for k in range(n - 2, -1, -1):
        value = If(Comparison(c, "<", starts[k + 1]), read(k), value)
    at = list(idx)
    at[p.axis] = c + p.base if p.base else c
    insn = lp.Assignment(var("dst")[offset(p.layouts[-1], at)], value,
                         within_inames=frozenset(inames))
    # sources unsized: each is read only where its branch is taken, which loopy's static
    # bounds check cannot follow (the Oclgrind tests check the reads)
    args = [global_arg(f"src{k}", None) for k in range(n)]
    args.append(global_arg("dst", p.sizes[-1], output=True, input=False))
    knl = lp.make_kernel(domain, [insn], args, name="pydnnl_concat", lang_version=(2018, 2),
                         target=lp.PyOpenCLTarget())
    return schedule(knl, p.dims, p.rows, p.wg)
