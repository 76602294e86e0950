"""The reorder primitive: copy a tensor into another layout and/or data type (``dnnl::reorder``)."""
from __future__ import annotations

from ..constants import ARG_ATTR_SCALES, ARG_ATTR_ZERO_POINTS, ARG_FROM, ARG_TO, arg_name
from ..engine import _cl
from ..engine import engine as _engine
from ..error import invalid_arguments
from ..memory import memory
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from ..runtime.plan import Plan, Ref
from .base import ArgSpec, primitive, primitive_desc_base
from .signature import MEMORY, Signature, bind


class reorder(primitive):
    """``reorder(src_mem, dst_mem, attr=None)`` or ``reorder(pd)``; then
    ``execute(stream, src, dst)`` or ``execute(stream, {ARG_FROM: src, ARG_TO: dst})``."""

    class primitive_desc(primitive_desc_base):
        """``reorder.primitive_desc(src_engine, src_md, dst_engine, dst_md, attr=None)``, or
        ``reorder.primitive_desc(src_mem, dst_mem, attr=None)``."""

        _kind = "reorder"
        signature = Signature(
            "reorder.primitive_desc", head=(),
            forms=(("src", "dst"), ("src_engine", "src_md", "dst_engine", "dst_md")),
            tail=("attr",), kinds={"src": MEMORY})

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            if "src" in a:  # the memory form
                src_engine, src_md = a["src"].get_engine(), a["src"].get_desc()
                dst = a["dst"]
                if not isinstance(dst, memory):
                    raise invalid_arguments(f"reorder: dst must be a pydnnl.memory, got "
                                            f"{type(dst).__name__}")
                dst_engine, dst_md = dst.get_engine(), dst.get_desc()
            else:
                src_engine, src_md = a["src_engine"], a["src_md"]
                dst_engine, dst_md = a["dst_engine"], a["dst_md"]
            self._init_base(src_engine, a["attr"])
            for name, md in (("src_md", src_md), ("dst_md", dst_md)):
                if not isinstance(md, MemoryDesc):
                    raise invalid_arguments(f"reorder: {name} must be a memory.desc, got "
                                            f"{type(md).__name__}")
                if md.is_zero() or md.is_any():
                    raise invalid_arguments(f"reorder: {name} must have a concrete layout, "
                                            f"got {md!r}")
            if not isinstance(dst_engine, _engine):
                raise invalid_arguments(f"reorder: dst_engine must be a pydnnl.engine, got "
                                        f"{type(dst_engine).__name__}")
            if src_md.dims != dst_md.dims:
                raise invalid_arguments(
                    f"reorder: src dims {list(src_md.dims)} and dst dims {list(dst_md.dims)} "
                    f"differ")
            if src_md.data_type == data_type.f64 or dst_md.data_type == data_type.f64:
                for e, which in ((src_engine, "src"), (dst_engine, "dst")):
                    if not e.info.fp64:
                        raise invalid_arguments(f"reorder: f64 data on a {which} device without "
                                                f"fp64 support ({e!r})")
            self._src_engine, self._dst_engine = src_engine, dst_engine
            self._args = {ARG_FROM: ArgSpec(src_md, False), ARG_TO: ArgSpec(dst_md, True)}
            for arg in list(self._attr.scales) + list(self._attr.zero_points):
                if arg not in (ARG_FROM, ARG_TO):
                    raise invalid_arguments(
                        f"reorder: scales/zero points may be set for ARG_FROM or ARG_TO, not "
                        f"{arg_name(arg)}")
            self._add_runtime_attr_args()
            if len(self._attr.get_post_ops()):
                raise invalid_arguments("reorder: post-ops are not supported by reorder (only "
                                        "sum in oneDNN); use scales and zero points")
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

    def __init__(self, *args, **kw):
        if len(args) == 1 and not kw and isinstance(args[0], reorder.primitive_desc):
            pd = args[0]
        else:
            pd = reorder.primitive_desc(*args, **kw)
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
            src_zp_mask=a.get_zero_points_mask(ARG_FROM),
            dst_zp_mask=a.get_zero_points_mask(ARG_TO))
        # the plan runs on the src engine (into a temporary in dst's layout across engines)
        self._plan = Plan(pd.get_src_engine(), "reorder")
        self._cross = pd.get_src_engine() != pd.get_dst_engine()
        if src.nelems() == 0:
            return
        # zero the padding where dst owns one contiguous span; a view into a bigger blocked
        # tensor (submemory with gaps) leaves the parent's padding and other parts alone
        if dst.get_padded_dims() != dst.get_dims() and dst.is_dense():
            start = 0 if self._cross else dst.offset0
            self._plan.zero(Ref(ARG_TO), start, dst.nelems_physical() - start,
                            dst.data_type.itemsize, "reorder_zero_padding")
        attr = [Ref(arg) for arg in (ARG_ATTR_ZERO_POINTS | ARG_FROM, ARG_ATTR_SCALES | ARG_FROM,
                                     ARG_ATTR_SCALES | ARG_TO, ARG_ATTR_ZERO_POINTS | ARG_TO)
                if arg in pd._args]
        kern = self._plan.get("reorder", self._problem, build_reorder)
        self._plan.launch(kern, (Ref(ARG_FROM), Ref(ARG_TO), *attr))

    def execute(self, s, *args):
        """``execute(stream, src, dst)`` or ``execute(stream, {ARG_FROM: src, ARG_TO: dst})``."""
        if len(args) == 2 and isinstance(args[0], memory):
            arg_map = {ARG_FROM: args[0], ARG_TO: args[1]}
        elif len(args) == 1:
            arg_map = args[0]
        else:
            raise invalid_arguments("reorder.execute: expected (stream, src, dst) or "
                                    "(stream, {ARG_*: memory})")
        super().execute(s, arg_map)

    def _execute(self, s, args) -> None:
        if not self._plan.steps:  # nothing to convert
            return
        if not self._cross:
            self._plan.execute(s, args)
            return
        # cross-engine: convert on the src engine into a temporary in dst's layout, then copy
        from ..stream import stream as _stream

        src_eng = self._pd.get_src_engine()
        dst = args[ARG_TO]
        tmp = memory(self._pd._args[ARG_TO].md, src_eng)
        ss = s if s.get_engine() == src_eng else _stream(src_eng)
        self._plan.execute(ss, {**args, ARG_TO: tmp})
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
            _cl().enqueue_copy(q, dst.buffer, raw[start:], dst_offset=start * raw.itemsize,
                            is_blocking=True)
