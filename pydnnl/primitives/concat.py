"""The concat primitive (``dnnl::concat``): sources of one rank, equal in every dim but
``concat_dimension``, laid one after the other along it in dst, with or without a destination
desc.

The plan is one generated copy kernel per source (:mod:`pydnnl.kernels.concat`), each writing
the source's region of dst through both tensors' own layouts (plain, strided, blocked, mixed),
so no work-item branches on which source it reads. Sources are f32, bf16 or f16, all of one
type; dst any of the three (default: the sources' type); the same type on both sides copies the
bits.

A destination left to the primitive (no dst desc, or ``format_tag.any``) takes oneDNN's rule:
the layout of the first blocked source whose blocks let every source be a region of dst,
else that of the first plain source, dense.
"""
from __future__ import annotations

import numpy as np

from ..constants import ARG_DST, ARG_MULTIPLE_SRC
from ..error import invalid_arguments
from ..kernels import binary as KB
from ..kernels import concat as K
from ..kernels.reorder import layout_of
from ..runtime.heuristics import binary as H
from ..runtime.plan import Plan, Ref
from .base import ArgSpec, primitive
from .binary import check_desc, check_index_range, like, plain, typed
from .signature import Kind, Signature, bind
from .sum import SRCS, check_srcs, multi_src_pd

__all__ = ["concat"]

INT = Kind("ints", "an int",
           lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool))


def _regions_fit(md, srcs, axis: int) -> bool:
    """Whether every source is a region of a dst in ``md``'s layout (blocks along the axis
    divide the sources' offsets)."""
    blk = md.block_sizes()[axis]
    if blk == 1:
        return True
    start = 0
    for i, s in enumerate(srcs):
        if start % blk or (s.dims[axis] % blk and i != len(srcs) - 1):
            return False
        start += s.dims[axis]
    return True


def default_dst(srcs, dims, axis: int):
    """oneDNN's choice for an ``any`` destination."""
    for md in srcs:
        if md.inner_blks:
            cand = like(md, dims)
            if _regions_fit(cand, srcs, axis):
                return cand
    for md in srcs:
        if not md.inner_blks:
            return like(md, dims)
    return plain(dims, srcs[0].data_type)


class concat(primitive):
    """dst = the sources laid one after the other along ``concat_dimension`` (oneDNN's concat;
    f32, bf16 or f16)."""

    class primitive_desc(multi_src_pd):
        """``concat.primitive_desc(engine, dst_desc, concat_dimension, srcs, attr=None)`` or
        ``concat.primitive_desc(engine, concat_dimension, srcs, attr=None)``."""

        _kind = "concat"
        signature = Signature(
            "concat.primitive_desc", head=("engine",),
            forms=(("dst_desc", "concat_dimension", "srcs"), ("concat_dimension", "srcs")),
            tail=("attr",), aliases={"aengine": "engine", "dst": "dst_desc"},
            kinds={"concat_dimension": INT, "srcs": SRCS},
            optional=frozenset({"dst_desc"}))

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            self._init_base(a["engine"], a["attr"])
            kind = "concat"
            srcs = self._srcs = check_srcs(kind, a["srcs"])
            nd = len(srcs[0].dims)
            axis = a["concat_dimension"]
            if not INT.accepts(axis) or not 0 <= int(axis) < nd:
                raise invalid_arguments(f"{kind}: concat_dimension must be an int in [0, {nd}) "
                                        f"for {nd}-D sources, got {axis!r}")
            axis = self._axis = int(axis)
            base = srcs[0].dims
            for i, md in enumerate(srcs):
                for d in range(nd):
                    if d != axis and md.dims[d] != base[d]:
                        raise invalid_arguments(
                            f"{kind}: srcs[{i}] dims {list(md.dims)} differ from srcs[0] dims "
                            f"{list(base)} in dimension {d}; sources may differ only in "
                            f"concat_dimension {axis}")
            dims = list(base)
            dims[axis] = sum(md.dims[axis] for md in srcs)
            dims = tuple(dims)
            dst = a.get("dst_desc")
            if dst is not None and not dst.is_zero():
                dst = check_desc(kind, "dst_desc", dst)
                if tuple(dst.dims) != dims:
                    raise invalid_arguments(f"{kind}: dst_desc dims {list(dst.dims)} must be "
                                            f"{list(dims)} (the sources' dims, their "
                                            f"concat_dimension {axis} sizes added)")
            if dst is None or dst.is_zero():
                dst = default_dst(srcs, dims, axis)
            elif dst.is_any():
                dst = typed(default_dst(srcs, dims, axis).with_data_type(dst.data_type),
                            srcs[0].data_type)
            self._check_attr()
            check_index_range(kind, srcs + [dst])
            for i, md in enumerate(srcs):
                self._args[ARG_MULTIPLE_SRC + i] = ArgSpec(md, False)
            self._args[ARG_DST] = ArgSpec(dst, True)
            self._impl = "ocl:concat:copy"
            self._info = (f"axis:{axis} " + ":".join("x".join(map(str, md.dims)) for md in srcs)
                          + f" -> {'x'.join(map(str, dims))}")
            self._finish_scratchpad(0)

        def get_concat_dimension(self) -> int:
            return self._axis

        def _problems(self, eng) -> list:
            """One copy problem per source (its region of dst), or one-launch problems over
            whole dst rows (:meth:`_fuse_rows`)."""
            axis = self._axis
            dst = self._args[ARG_DST].md
            dst_lay = layout_of(dst)
            out, start = [], 0
            for md in self._srcs:
                off, terms = dst_lay
                blk, stride, inner = terms[axis]
                src_lay = layout_of(md)
                if start % blk == 0:  # the region is dst's layout from a shifted offset0
                    region = (off + start // blk * stride, terms)
                    dims, lays, _ = KB.collapse(md.dims, [src_lay, region], order_by=-1)
                    cat_axis, base = None, 0
                else:  # a region starting inside a block: dst's axis index adds `start`
                    dims, lays, pos = KB.collapse(md.dims, [src_lay, dst_lay], order_by=-1,
                                                  keep=(axis,))
                    cat_axis, base = pos[axis], start
                wg, rows = H.launch(eng.info, dims)
                out.append(K.ConcatProblem(
                    dims=tuple(dims), layouts=tuple(lays),
                    sizes=(md.nelems_physical(), dst.nelems_physical()), axis=cat_axis,
                    base=base, wg=wg, rows=rows, iters=H.items(eng.info),
                    dts=(int(md.data_type), int(dst.data_type))))
                start += md.dims[axis]
            return self._fuse_rows(eng, out)

        def _fuse_rows(self, eng, probs):
            """Per-source problems that are all short rows over the same outer dims become
            one-launch problems (chunks of ``max_inputs`` sources): work-groups own whole dst
            rows. Others stay as they are."""
            outer = probs[0].dims[:-1]
            per = max(1, H.max_inputs(eng.info))
            if len(probs) > 1 and H.concat_spans(eng.info) and all(
                    (q.rows or len(q.dims) == 1) and q.axis is None and q.dims[-1] >= q.wg
                    and q.dims[:-1] == outer for q in probs):
                return [K.ConcatSpansProblem(
                    outer=tuple(outer), inners=tuple(q.dims[-1] for q in chunk),
                    layouts=tuple(lay for q in chunk for lay in q.layouts),
                    sizes=tuple(q.sizes[0] for q in chunk) + (chunk[0].sizes[1],),
                    wg=chunk[0].wg, iters=chunk[0].iters, dts=chunk[0].dts)
                    for chunk in (probs[c:c + per] for c in range(0, len(probs), per))]
            if not all(q.rows and q.axis is None and len(q.dims) > 1 and q.dims[-1] < q.wg
                       and q.dims[:-1] == outer for q in probs):
                return probs
            out = []
            for c in range(0, len(probs), per):
                chunk = probs[c:c + per]
                inners = tuple(q.dims[-1] for q in chunk)
                out.append(K.ConcatRowsProblem(
                    outer=tuple(outer), inners=inners,
                    layouts=tuple(lay for q in chunk for lay in q.layouts),
                    sizes=tuple(q.sizes[0] for q in chunk) + (chunk[0].sizes[1],),
                    per_group=H.concat_rows_per_group(eng.info, max(inners)),
                    dts=chunk[0].dts))
            return out

    def _create(self) -> None:
        pd = self._pd
        plan = self._plan = Plan(pd.get_engine(), "concat")
        k = 0
        for problem in pd._problems(pd.get_engine()):
            if isinstance(problem, (K.ConcatRowsProblem, K.ConcatSpansProblem)):
                n = len(problem.inners)
                named = {f"src{j}": Ref(ARG_MULTIPLE_SRC + k + j) for j in range(n)}
                rows = isinstance(problem, K.ConcatRowsProblem)
                plan.kernel("concat_rows" if rows else "concat_spans", problem,
                            K.build_concat_rows if rows else K.build_concat_spans,
                            dst=Ref(ARG_DST), **named)
                k += n
            else:
                plan.kernel("concat", problem, K.build_concat, src=Ref(ARG_MULTIPLE_SRC + k),
                            dst=Ref(ARG_DST))
                k += 1

    def _execute(self, s, args) -> None:
        out = args[ARG_DST]
        for i in range(len(self._pd._srcs)):
            if args[ARG_MULTIPLE_SRC + i].buffer is out.buffer:
                raise invalid_arguments(
                    f"concat.execute: ARG_MULTIPLE_SRC+{i} and ARG_DST are one buffer; the "
                    f"concat cannot run in place")
        self._plan.execute(s, args)
