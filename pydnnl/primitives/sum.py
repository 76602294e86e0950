"""The sum primitive (``dnnl::sum``): ``dst = sum_i scales[i] * src_i`` over any number of
inputs of one shape (no broadcast), with or without a destination desc. Sources are f32, bf16
or f16, all of one type; dst any of the three (default: the sources' type); the kernel
accumulates in f32 and rounds once per launch.

The plan is one generated kernel reading every input once (:mod:`pydnnl.kernels.sum`): flat
when every tensor is dense in one storage order, else over the collapsed index space with each
tensor's own strides and inner blocks. More inputs than one kernel takes
(:func:`pydnnl.runtime.heuristics.binary.max_inputs`) run as a few launches, each after the
first adding into dst.

A destination left to the primitive (no dst desc, or ``format_tag.any``) takes oneDNN's rule:
the layout of the first blocked (non-plain) source, else that of the first source, dense.

Note: this module's class is named ``sum`` as oneDNN's; Python's builtin is
``builtins.sum`` here.
"""
from __future__ import annotations

from ..constants import ARG_DST, ARG_MULTIPLE_SRC, query
from ..error import invalid_arguments, unimplemented
from ..kernels import binary as KB
from ..kernels import sum as K
from ..kernels.reorder import layout_of
from ..memory.desc import MemoryDesc
from ..runtime.heuristics import binary as H
from ..runtime.plan import Plan, Ref
from .base import ArgSpec, primitive, primitive_desc_base
from .binary import check_desc, check_index_range, like, same_dense, typed
from .signature import NUMBER, Kind, Signature, bind

__all__ = ["sum"]


def _is_desc_list(v) -> bool:
    return isinstance(v, (list, tuple)) and all(isinstance(m, MemoryDesc) for m in v)


def _is_number_list(v) -> bool:
    try:
        items = list(v)
    except TypeError:
        return False
    return not isinstance(v, (str, bytes)) and all(NUMBER.accepts(x) for x in items)


SCALES = Kind("lists of numbers", "a list of floats", _is_number_list)
SRCS = Kind("lists of memory descs", "a list of memory.desc", _is_desc_list)


class multi_src_pd(primitive_desc_base):
    """Queries of a primitive with ``ARG_MULTIPLE_SRC + i`` inputs (sum, concat)."""

    def src_desc(self, index: int = 0) -> MemoryDesc:
        spec = self._args.get(ARG_MULTIPLE_SRC + int(index))
        return spec.md if spec and index >= 0 else MemoryDesc()

    def query_md(self, what, index: int = 0) -> MemoryDesc:
        if query(what) == query.src_md:
            return self.src_desc(index)
        return super().query_md(what, index)

    def _arg_label(self, arg: int) -> str:
        n = len(self._srcs)
        if ARG_MULTIPLE_SRC <= arg < ARG_MULTIPLE_SRC + max(n, 1):
            return f"ARG_MULTIPLE_SRC+{arg - ARG_MULTIPLE_SRC}"
        return super()._arg_label(arg)

    def _verbose_mds(self) -> str:
        srcs = " ".join(f"src{i}:{md.short_str()}" for i, md in enumerate(self._srcs))
        return f"{srcs} dst:{self._args[ARG_DST].md.short_str()}"

    def _check_attr(self) -> None:
        if len(self._attr.get_post_ops()) or self._attr.scales or self._attr.zero_points:
            raise unimplemented(f"{self._kind}: attr with post-ops, scales or zero points is "
                                f"not implemented (oneDNN's {self._kind} takes none; got "
                                f"{self._attr.key()!r})")


def check_srcs(kind: str, srcs) -> list[MemoryDesc]:
    """The source descs: a non-empty list of concrete descs of one rank and one data type
    (f32, bf16 or f16)."""
    if not _is_desc_list(srcs) or len(srcs) == 0:
        raise invalid_arguments(f"{kind}: srcs must be a non-empty list of memory.desc, got "
                                f"{srcs!r}")
    out = []
    for i, md in enumerate(srcs):
        md = check_desc(kind, f"srcs[{i}]", md, allow_any=False)
        if len(md.dims) != len(srcs[0].dims):
            raise invalid_arguments(f"{kind}: srcs[{i}] has {len(md.dims)} dims "
                                    f"{list(md.dims)}, srcs[0] {len(srcs[0].dims)} "
                                    f"{list(srcs[0].dims)}; every source must have as many")
        if out and md.data_type != out[0].data_type:
            raise unimplemented(f"{kind}: srcs[{i}] data type {md.data_type.name} differs from "
                                f"srcs[0]'s {out[0].data_type.name}; sources of one data type "
                                f"are implemented")
        out.append(md)
    return out


def default_dst(srcs, dims) -> MemoryDesc:
    """oneDNN's choice for an ``any`` destination: the first blocked source's layout, else
    the first source's (dense, over ``dims``), of the sources' data type."""
    for md in srcs:
        if md.inner_blks:
            return like(md, dims)
    return like(srcs[0], dims)


class sum(primitive):
    """``dst = sum_i scales[i] * src_i`` (oneDNN's sum; f32, bf16 or f16, computed in f32)."""

    class primitive_desc(multi_src_pd):
        """``sum.primitive_desc(engine, dst_desc, scales, srcs, attr=None)`` or
        ``sum.primitive_desc(engine, scales, srcs, attr=None)``."""

        _kind = "sum"
        signature = Signature(
            "sum.primitive_desc", head=("engine",),
            forms=(("dst_desc", "scales", "srcs"), ("scales", "srcs")), tail=("attr",),
            aliases={"aengine": "engine", "dst": "dst_desc"},
            kinds={"scales": SCALES, "srcs": SRCS},
            optional=frozenset({"dst_desc"}))

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            self._init_base(a["engine"], a["attr"])
            kind = "sum"
            srcs = self._srcs = check_srcs(kind, a["srcs"])
            scales = a["scales"]
            if not _is_number_list(scales):
                raise invalid_arguments(f"{kind}: scales must be a list of numbers, got "
                                        f"{scales!r}")
            scales = [float(s) for s in scales]
            if len(scales) != len(srcs):
                raise invalid_arguments(f"{kind}: {len(scales)} scales for {len(srcs)} "
                                        f"sources; give one scale per source")
            dims = tuple(srcs[0].dims)
            for i, md in enumerate(srcs):
                if tuple(md.dims) != dims:
                    raise invalid_arguments(f"{kind}: srcs[{i}] dims {list(md.dims)} differ "
                                            f"from srcs[0] dims {list(dims)}; the sum does not "
                                            f"broadcast")
            dst = a.get("dst_desc")
            if dst is not None and not dst.is_zero():
                dst = check_desc(kind, "dst_desc", dst)
                if tuple(dst.dims) != dims:
                    raise invalid_arguments(f"{kind}: dst_desc dims {list(dst.dims)} must "
                                            f"equal the sources' dims {list(dims)}")
            if dst is None or dst.is_zero():
                dst = default_dst(srcs, dims)
            elif dst.is_any():
                dst = typed(default_dst(srcs, dims).with_data_type(dst.data_type),
                            srcs[0].data_type)
            self._check_attr()
            check_index_range(kind, srcs + [dst])
            self._scales = tuple(scales)
            for i, md in enumerate(srcs):
                self._args[ARG_MULTIPLE_SRC + i] = ArgSpec(md, False)
            self._args[ARG_DST] = ArgSpec(dst, True)
            mds = srcs + [dst]
            if same_dense(mds):
                self._dims = (dst.nelems(),)
                self._layouts = tuple(KB.dense_layout(md.offset0) for md in mds)
                self._impl = "ocl:sum:flat"
            else:
                self._dims, self._layouts, _ = KB.collapse(
                    dims, [layout_of(md) for md in mds], order_by=-1)
                self._impl = "ocl:sum:strided"
            self._info = (f"n:{len(srcs)} {'x'.join(map(str, dims))} scales:"
                          + ":".join(f"{s:g}" for s in scales))
            self._finish_scratchpad(0)

        def get_scales(self) -> list[float]:
            return list(self._scales)

        def _problems(self, eng) -> list[tuple[K.SumProblem, range]]:
            """One kernel problem per chunk of sources."""
            wg, rows = H.launch(eng.info, self._dims)
            per = max(1, H.max_inputs(eng.info))
            n = len(self._srcs)
            dst_size = self._args[ARG_DST].md.nelems_physical()
            out = []
            for start in range(0, n, per):
                ks = range(start, min(n, start + per))
                out.append((K.SumProblem(
                    scales=tuple(self._scales[k] for k in ks), dims=self._dims,
                    layouts=tuple(self._layouts[k] for k in ks) + (self._layouts[-1],),
                    sizes=tuple(self._srcs[k].nelems_physical() for k in ks) + (dst_size,),
                    accumulate=start > 0, wg=wg, rows=rows, iters=H.items(eng.info),
                    dts=tuple(int(self._srcs[k].data_type) for k in ks)
                    + (int(self._args[ARG_DST].md.data_type),)), ks))
            return out

    def _create(self) -> None:
        pd = self._pd
        plan = self._plan = Plan(pd.get_engine(), "sum")
        self._first = len(pd._srcs)
        for problem, ks in pd._problems(pd.get_engine()):
            if ks.start == 0:
                self._first = len(ks)
            named = {f"src{j}": Ref(ARG_MULTIPLE_SRC + k) for j, k in enumerate(ks)}
            plan.kernel("sum", problem, K.build_sum, dst=Ref(ARG_DST), **named)

    def _execute(self, s, args) -> None:
        pd = self._pd
        out = args[ARG_DST]
        for i in range(len(pd._srcs)):
            m = args[ARG_MULTIPLE_SRC + i]
            if m.buffer is not out.buffer:
                continue
            if m.get_desc() != out.get_desc():
                raise invalid_arguments(
                    f"sum.execute: ARG_MULTIPLE_SRC+{i} and ARG_DST share one buffer with "
                    f"different descs ({m.get_desc()!r} vs {out.get_desc()!r}); in-place use "
                    f"needs the same desc")
            if i >= self._first:
                raise invalid_arguments(
                    f"sum.execute: ARG_MULTIPLE_SRC+{i} is ARG_DST's memory; with "
                    f"{len(pd._srcs)} sources the sum runs in several passes and only one of "
                    f"the first {self._first} sources may be the destination")
        self._plan.execute(s, args)

