"""The reorder primitive: copy a tensor into another layout and/or data type (``dnnl::reorder``)."""
from __future__ import annotations

from ..attr import primitive_attr
from ..constants import (ARG_ATTR_SCALES, ARG_ATTR_ZERO_POINTS, ARG_FROM, ARG_TO, arg_name)
from ..engine import _cl, engine as _engine
from ..error import invalid_arguments
from ..kernels.compiler import get_kernel
from ..memory import memory
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from .base import ArgSpec, primitive, primitive_desc_base


class _reorder_pd(primitive_desc_base):
    """``reorder.primitive_desc(src_engine, src_md, dst_engine, dst_md, attr=None)``, or
    ``reorder.primitive_desc(src_mem, dst_mem, attr=None)``."""

    _kind = "reorder"

    def __init__(self, *args, attr: primitive_attr | None = None, **kw):
        src_engine, src_md, dst_engine, dst_md, attr = _parse_pd_args(args, kw, attr)
        self._init_base(src_engine, attr)
        for name, md in (("src_md", src_md), ("dst_md", dst_md)):
            if not isinstance(md, MemoryDesc):
                raise invalid_arguments(f"reorder: {name} must be a memory.desc, got {type(md).__name__}")
            if md.is_zero() or md.is_any():
                raise invalid_arguments(f"reorder: {name} must have a concrete layout, got {md!r}")
        if not isinstance(dst_engine, _engine):
            raise invalid_arguments(f"reorder: dst_engine must be a pydnnl.engine, got {type(dst_engine).__name__}")
        if src_md.dims != dst_md.dims:
            raise invalid_arguments(
                f"reorder: src dims {list(src_md.dims)} and dst dims {list(dst_md.dims)} differ")
        if src_md.data_type == data_type.f64 or dst_md.data_type == data_type.f64:
            for e, which in ((src_engine, "src"), (dst_engine, "dst")):
                if not e.info.fp64:
                    raise invalid_arguments(f"reorder: f64 data on a {which} device without fp64 support ({e!r})")
        self._src_engine, self._dst_engine = src_engine, dst_engine
        self._args = {ARG_FROM: ArgSpec(src_md, False), ARG_TO: ArgSpec(dst_md, True)}
        for arg in list(self._attr.scales) + list(self._attr.zero_points):
            if arg not in (ARG_FROM, ARG_TO):
                raise invalid_arguments(
                    f"reorder: scales/zero points may be set for ARG_FROM or ARG_TO, not {arg_name(arg)}")
        self._add_runtime_attr_args()
        if len(self._attr.get_post_ops()):
            raise invalid_arguments("reorder: post-ops are not supported by reorder (only sum in oneDNN); "
                                    "use scales and zero points")
        self._impl = "loopy:reorder" + ("" if src_engine == dst_engine else ":cross_engine")
        self._info = f"{src_md.short_str()} -> {dst_md.short_str()}"
        self._finish_scratchpad(0)

    def src_desc(self, index: int = 0) -> MemoryDesc:
        return self._args[ARG_FROM].md if index == 0 else MemoryDesc()

    def dst_desc(self, index: int = 0) -> MemoryDesc:
        return self._args[ARG_TO].md if index == 0 else MemoryDesc()

    def _arg_engine(self, arg: int) -> _engine:
        # scales and zero points are read by the conversion kernel, which runs on the src engine
        return self._dst_engine if arg == ARG_TO else self._src_engine

    def _stream_engine_ok(self, eng: _engine) -> bool:
        return eng in (self._src_engine, self._dst_engine)

    def get_src_engine(self) -> _engine:
        return self._src_engine

    def get_dst_engine(self) -> _engine:
        return self._dst_engine


def _parse_pd_args(args, kw, attr):
    if args and isinstance(args[0], memory):
        src, dst = args[0], (args[1] if len(args) > 1 else kw.pop("dst", None))
        if not isinstance(dst, memory):
            raise invalid_arguments(f"reorder: dst must be a pydnnl.memory, got {type(dst).__name__}")
        if len(args) > 2:
            attr = args[2]
        return src.get_engine(), src.get_desc(), dst.get_engine(), dst.get_desc(), attr
    names = ("src_engine", "src_md", "dst_engine", "dst_md", "attr")
    vals = dict(zip(names, args))
    for k, v in kw.items():
        if k not in names:
            raise invalid_arguments(f"reorder.primitive_desc: unknown keyword {k!r}")
        vals[k] = v
    missing = [n for n in names[:4] if n not in vals]
    if missing:
        raise invalid_arguments(f"reorder.primitive_desc: missing {', '.join(missing)}")
    return vals["src_engine"], vals["src_md"], vals["dst_engine"], vals["dst_md"], vals.get("attr", attr)


class reorder(primitive):
    """``reorder(src_mem, dst_mem, attr=None)`` or ``reorder(pd)``; then
    ``execute(stream, src, dst)`` or ``execute(stream, {ARG_FROM: src, ARG_TO: dst})``."""

    primitive_desc = _reorder_pd

    def __init__(self, *args, **kw):
        if len(args) == 1 and not kw and isinstance(args[0], _reorder_pd):
            pd = args[0]
        else:
            pd = _reorder_pd(*args, **kw)
        super().__init__(pd)

    def _create(self) -> None:
        from ..kernels.reorder import ReorderProblem, build_reorder, layout_of

        pd = self._pd
        src, dst = pd._args[ARG_FROM].md, pd._args[ARG_TO].md
        a = pd._attr
        self._problem = ReorderProblem(
            dims=src.dims, src_dt=src.data_type, dst_dt=dst.data_type,
            src_layout=layout_of(src), dst_layout=layout_of(dst),
            src_nelems=src.nelems_physical(), dst_nelems=dst.nelems_physical(),
            src_scale_mask=a.get_scales_mask(ARG_FROM), dst_scale_mask=a.get_scales_mask(ARG_TO),
            src_zp_mask=a.get_zero_points_mask(ARG_FROM), dst_zp_mask=a.get_zero_points_mask(ARG_TO))
        eng = pd.get_src_engine()
        self._kernel = None
        if src.nelems() > 0:
            self._kernel = get_kernel(eng, "reorder", self._problem,
                                      lambda: build_reorder(self._problem))
        self._attr_args = [(name, arg) for name, arg in (
            ("src_zp", ARG_ATTR_ZERO_POINTS | ARG_FROM), ("src_scale", ARG_ATTR_SCALES | ARG_FROM),
            ("dst_scale", ARG_ATTR_SCALES | ARG_TO), ("dst_zp", ARG_ATTR_ZERO_POINTS | ARG_TO))
            if arg in pd._args]
        # zero the padding where dst owns one contiguous span; a view into a bigger blocked
        # tensor (submemory with gaps) leaves the parent's padding and other parts alone
        self._pad_fill = dst.get_padded_dims() != dst.get_dims() and dst.is_dense()
        isz = dst.data_type.itemsize
        self._dst_span = (dst.offset0 * isz, (dst.nelems_physical() - dst.offset0) * isz)
        self._cross = pd.get_src_engine() != pd.get_dst_engine()

    def execute(self, s, *args):
        """``execute(stream, src, dst)`` or ``execute(stream, {ARG_FROM: src, ARG_TO: dst, ...})``."""
        if len(args) == 2 and isinstance(args[0], memory):
            arg_map = {ARG_FROM: args[0], ARG_TO: args[1]}
        elif len(args) == 1:
            arg_map = args[0]
        else:
            raise invalid_arguments("reorder.execute: expected (stream, src, dst) or (stream, {ARG_*: memory})")
        super().execute(s, arg_map)

    def _execute(self, s, args) -> None:
        src, dst = args[ARG_FROM], args[ARG_TO]
        if self._kernel is None:
            return
        cl = _cl()
        extra = [args[arg].buffer for _, arg in self._attr_args]
        if not self._cross:
            wait = None
            if self._pad_fill:
                evt = cl.enqueue_fill_buffer(s.queue, dst.buffer, b"\0", *self._dst_span)
                s.record("reorder_zero_padding", evt)
                wait = [evt]  # out-of-order queues: the fill must finish before the kernel
            self._kernel(s, src.buffer, dst.buffer, *extra, wait_for=wait)
            return
        # cross-engine: convert on the src engine into a temporary in dst's layout, then copy
        from ..stream import stream as _stream

        src_eng = self._pd.get_src_engine()
        tmp = memory(self._pd._args[ARG_TO].md, src_eng)
        ss = s if s.get_engine() == src_eng else _stream(src_eng)
        wait = None
        if self._pad_fill:
            wait = [cl.enqueue_fill_buffer(ss.queue, tmp.buffer, b"\0", 0, tmp.buffer.size)]
        self._kernel(ss, src.buffer, tmp.buffer, *extra, wait_for=wait)
        ss.wait()
        raw = tmp.read_raw()
        md = self._pd._args[ARG_TO].md
        q = s.queue if s.get_engine() == dst.get_engine() else dst.get_engine().default_queue
        start = md.offset0  # storage before offset0 belongs to other parts of the buffer
        if not md.is_dense():  # a view with gaps: write only its elements, keep the rest
            if s.get_engine() == dst.get_engine():
                s.wait()
            cur = dst.read_raw()
            idx = md.element_offsets()
            cur[idx] = raw[idx]
            raw, start = cur, 0
        if raw.size > start:
            cl.enqueue_copy(q, dst.buffer, raw[start:], dst_offset=start * raw.itemsize,
                            is_blocking=True)
