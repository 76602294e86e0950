"""Loopy generator of concat kernels: one launch copies one source into its region of dst
(every element read once, written once, no branch on which source covers it).

The index space is the source's own, collapsed with dst's region
(:func:`pydnnl.kernels.binary.collapse`), with the launch shapes of
:mod:`pydnnl.kernels.binary`: a concat along channels of NCHW tensors is one long row per
image (consecutive addresses on both sides), a concat along the innermost axis is rows of the
source's extent written at dst's stride. The primitive passes dst's layout already shifted to
the region where it can (a plain axis, or a blocked one the region starts on a block of), so
the kernel is a copy; otherwise the axis is kept whole (``axis``) and the kernel adds ``base``
to the axis index of dst.

Same data type on both sides: the bits are copied (bit-exact for every value, NaN payloads
included); otherwise the value goes through f32 with oneDNN's rounding
(:func:`pydnnl.kernels.binary.store`).

Measured on Intel's CPU runtime (2-core AMD EPYC, f32, 64 MiB dst, alternating runs): the
former single kernel with one guarded copy per source ran an innermost-axis concat at 0.21-0.29
of the copy kernel's bandwidth and a channel concat at 0.5-0.6 (lanes branching per source,
index division per element); see :mod:`pydnnl.runtime.heuristics.binary` for the new numbers.
Pure: no engine, no argument maps.
"""
from __future__ import annotations

from dataclasses import dataclass

from .binary import F32, global_arg, grid, load, offset, schedule, store, type_helpers


@dataclass(frozen=True)
class ConcatProblem:
    """Copy one source into dst over the (collapsed) index space ``dims``.

    ``layouts`` / ``sizes`` / ``dts`` hold the source's and dst's layout over ``dims``, storage
    elements and data type. With ``axis`` set (not None) dst is read at index ``idx[axis] +
    base`` on that dim (a region that does not start on one of dst's blocks)."""

    dims: tuple[int, ...]
    layouts: tuple
    sizes: tuple[int, int]
    axis: int | None = None
    base: int = 0
    wg: int = 256
    rows: bool = False
    iters: int = 1  # elements per work-item (see kernels.binary.grid)
    dts: tuple[int, int] = (F32, F32)


ARG_NAMES = ("src", "dst")


def build_concat(p: ConcatProblem):
    """loopy TranslationUnit ``(src, dst)``."""
    import loopy as lp
    from pymbolic import var

    if len(p.layouts) != 2 or len(p.sizes) != 2:
        raise ValueError("concat kernel: one source and dst (two layouts and sizes)")
    domain, inames, idx = grid(p.dims, p.rows, p.wg, p.iters)
    at = list(idx)
    if p.axis is not None and p.base:
        at[p.axis] = at[p.axis] + p.base
    sdt, ddt = p.dts
    value = var("src")[offset(p.layouts[0], idx)]
    if sdt != ddt:
        value = store(ddt, load(sdt, value))
    insn = lp.Assignment(var("dst")[offset(p.layouts[1], at)], value,
                         within_inames=frozenset(inames))
    args = [global_arg("src", p.sizes[0], dt=sdt),
            global_arg("dst", p.sizes[1], output=True, input=False, dt=ddt)]
    knl = lp.make_kernel(domain, [insn], args, name="pydnnl_concat", lang_version=(2018, 2),
                         target=lp.PyOpenCLTarget())
    knl = schedule(knl, p.dims, p.rows, p.wg, p.iters)
    if sdt != ddt:
        from .clhelpers import register_helpers

        knl = register_helpers(knl, type_helpers((sdt,), (ddt,)))
    return knl


@dataclass(frozen=True)
class ConcatRowsProblem:
    """Several sources copied in one launch where each is short rows (innermost extent
    ``inners[k]`` below a work-group) over the same ``outer`` dims: a work-group covers
    ``per_group`` outer rows of dst whole, every source's part of them (dst written in
    contiguous runs, not in one strided pass per source).

    ``layouts`` holds (src, dst region) per source, each over ``outer + (inners[k],)``;
    ``sizes`` and ``dts`` the sources' and then dst's storage elements and data types."""

    outer: tuple[int, ...]
    inners: tuple[int, ...]
    layouts: tuple
    sizes: tuple[int, ...]
    per_group: int
    dts: tuple[int, int] = (F32, F32)


def rows_arg_names(n: int) -> tuple[str, ...]:
    """The buffer arguments of :func:`build_concat_rows`: ``src0 .. src<n-1>, dst``."""
    return tuple(f"src{k}" for k in range(n)) + ("dst",)


def build_concat_rows(p: ConcatRowsProblem):
    """loopy TranslationUnit ``(src0, ..., src<n-1>, dst)``: work-group ``g`` copies outer rows
    ``per_group * g + r`` (local axis 1) of every source, lanes along each row (local axis 0,
    as wide as the longest row; shorter rows leave lanes idle)."""
    import math

    import loopy as lp
    from pymbolic import var

    from .binary import _decompose

    n = len(p.inners)
    if n < 1 or len(p.layouts) != 2 * n or len(p.sizes) != n + 1:
        raise ValueError(f"concat rows kernel: {n} sources need {2 * n} layouts, {n + 1} sizes")
    outer = math.prod(p.outer)
    per = p.per_group
    groups = -(-outer // per)
    lanes = " and ".join(f"0 <= l{k} < {e}" for k, e in enumerate(p.inners))
    cond = f" and {per} * g + r < {outer}" if outer % per else ""
    names = ", ".join(["g", "r"] + [f"l{k}" for k in range(n)])
    domain = f"{{[{names}]: 0 <= g < {groups} and 0 <= r < {per} and {lanes}{cond}}}"
    o = per * var("g") + var("r") if per > 1 else var("g")
    oidx = _decompose(o, p.outer) if p.outer else []
    sdt, ddt = p.dts
    insns = []
    for k in range(n):
        idx = oidx + [var(f"l{k}")]
        value = var(f"src{k}")[offset(p.layouts[2 * k], idx)]
        if sdt != ddt:
            value = store(ddt, load(sdt, value))
        insns.append(lp.Assignment(var("dst")[offset(p.layouts[2 * k + 1], idx)], value,
                                   id=f"copy{k}",
                                   within_inames=frozenset(["g", "r", f"l{k}"]),
                                   no_sync_with=frozenset((f"copy{j}", "any")
                                                          for j in range(n) if j != k)))
    args = [global_arg(f"src{k}", p.sizes[k], dt=sdt) for k in range(n)]
    args.append(global_arg("dst", p.sizes[-1], output=True, input=False, dt=ddt))
    knl = lp.make_kernel(domain, insns, args, name="pydnnl_concat_rows",
                         lang_version=(2018, 2), target=lp.PyOpenCLTarget())
    tags = {"g": "g.0", "r": "l.1"}
    tags.update({f"l{k}": "l.0" for k in range(n)})
    knl = lp.tag_inames(knl, tags)
    if sdt != ddt:
        from .clhelpers import register_helpers

        knl = register_helpers(knl, type_helpers((sdt,), (ddt,)))
    return knl


@dataclass(frozen=True)
class ConcatSpansProblem:
    """Several sources copied in one launch where each is long rows (innermost extent
    ``inners[k]`` of at least ``wg``) over the same ``outer`` dims: work-group ``g`` copies span
    ``g`` of every source that has one (a span: ``wg * iters`` consecutive elements of one
    row, ``iters`` per work-item ``wg`` apart), so one launch moves every source with all their
    loads in flight (GPUs: one launch instead of one per source).

    ``layouts``, ``sizes`` and ``dts`` as in :class:`ConcatRowsProblem`."""

    outer: tuple[int, ...]
    inners: tuple[int, ...]
    layouts: tuple
    sizes: tuple[int, ...]
    wg: int = 256
    iters: int = 1
    dts: tuple[int, int] = (F32, F32)

    def spans(self, k: int) -> int:
        """Spans per row of source ``k``."""
        return -(-self.inners[k] // (self.wg * self.iters))


def build_concat_spans(p: ConcatSpansProblem):
    """loopy TranslationUnit ``(src0, ..., src<n-1>, dst)`` (see :class:`ConcatSpansProblem`);
    the launch has as many work-groups as the source with the most spans."""
    import math

    import loopy as lp
    from pymbolic import var
    from pymbolic.primitives import FloorDiv, Remainder

    from .binary import _decompose

    n = len(p.inners)
    if n < 1 or len(p.layouts) != 2 * n or len(p.sizes) != n + 1:
        raise ValueError(f"concat spans kernel: {n} sources need {2 * n} layouts, "
                         f"{n + 1} sizes")
    if min(p.inners) < p.wg:
        raise ValueError(f"concat spans kernel: rows {p.inners} shorter than a work-group "
                         f"({p.wg})")
    outer = math.prod(p.outer)
    span = p.wg * p.iters
    sdt, ddt = p.dts
    domains, insns, tags = [], [], {}
    for k in range(n):
        g, it, lane = f"g{k}", f"k{k}", f"l{k}"
        gpr = p.spans(k)
        cond = (f" and {span} * ({g} mod {gpr}) + {p.wg} * {it} + {lane} < {p.inners[k]}"
                if p.inners[k] % span else "")
        domains.append(f"{{[{g}, {it}, {lane}]: 0 <= {g} < {outer * gpr} and "
                       f"0 <= {it} < {p.iters} and 0 <= {lane} < {p.wg}{cond}}}")
        o = FloorDiv(var(g), gpr) if gpr > 1 else var(g)
        j = p.wg * var(it) + var(lane)
        if gpr > 1:
            j = span * Remainder(var(g), gpr) + j
        idx = (_decompose(o, p.outer) if p.outer else []) + [j]
        value = var(f"src{k}")[offset(p.layouts[2 * k], idx)]
        if sdt != ddt:
            value = store(ddt, load(sdt, value))
        insns.append(lp.Assignment(var("dst")[offset(p.layouts[2 * k + 1], idx)], value,
                                   id=f"copy{k}", within_inames=frozenset([g, it, lane]),
                                   no_sync_with=frozenset((f"copy{m}", "any")
                                                          for m in range(n) if m != k)))
        tags.update({g: "g.0", it: "unr", lane: "l.0"})
    args = [global_arg(f"src{k}", p.sizes[k], dt=sdt) for k in range(n)]
    args.append(global_arg("dst", p.sizes[-1], output=True, input=False, dt=ddt))
    knl = lp.make_kernel(domains, insns, args, name="pydnnl_concat_spans",
                         lang_version=(2018, 2), target=lp.PyOpenCLTarget())
    knl = lp.tag_inames(knl, tags)
    if sdt != ddt:
        from .clhelpers import register_helpers

        knl = register_helpers(knl, type_helpers((sdt,), (ddt,)))
    return knl

