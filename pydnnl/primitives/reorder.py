"""The reorder primitive: copy a tensor into another layout and/or data type (``dnnl::reorder``).

With an int8 RNN's quantization parameters in the attributes (``set_rnn_data_qparams``,
``set_rnn_weights_qparams``, ``set_rnn_weights_projection_qparams``) it is oneDNN's quantizing
reorder of RNN data and weights: :func:`rnn_quantization` says which reorders take them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..constants import ARG_ATTR_SCALES, ARG_ATTR_ZERO_POINTS, ARG_FROM, ARG_TO, arg_name
from ..engine import _cl
from ..engine import engine as _engine
from ..error import invalid_arguments, unimplemented
from ..memory import memory
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from ..runtime.plan import INDEX, Plan, Ref
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
            self._rnn = rnn_quantization(src_md, dst_md, self._attr)
            self._impl = ("loopy:reorder" + (f":{self._rnn.kind}" if self._rnn else "")
                          + ("" if src_engine == dst_engine else ":cross_engine"))
            self._info = f"{src_md.short_str()} -> {dst_md.short_str()}" + (
                f" {self._rnn.describe()}" if self._rnn else "")
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
        from ..kernels.reorder import ReorderProblem, layout_of

        pd = self._pd
        src, dst = pd._args[ARG_FROM].md, pd._args[ARG_TO].md
        a = pd._attr
        rnn = pd._rnn
        quantize = rnn is not None and src.data_type == data_type.f32  # s8 weights: a copy
        self._problem = ReorderProblem(
            dims=src.dims, src_dt=src.data_type, dst_dt=dst.data_type,
            src_layout=layout_of(src), dst_layout=layout_of(dst),
            src_nelems=src.nelems_physical(), dst_nelems=dst.nelems_physical(),
            src_scale_mask=a.get_scales_mask(ARG_FROM), dst_scale_mask=a.get_scales_mask(ARG_TO),
            src_zp_mask=a.get_zero_points_mask(ARG_FROM),
            dst_zp_mask=a.get_zero_points_mask(ARG_TO),
            rnn_data=quantize and rnn.kind == "rnn_data",
            rnn_weights_mask=rnn.mask if quantize and rnn.kind != "rnn_data" else None)
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
        named = {name: Ref(arg) for name, arg in (
            ("src_zp", ARG_ATTR_ZERO_POINTS | ARG_FROM), ("src_scale", ARG_ATTR_SCALES | ARG_FROM),
            ("dst_scale", ARG_ATTR_SCALES | ARG_TO), ("dst_zp", ARG_ATTR_ZERO_POINTS | ARG_TO))
            if arg in pd._args}
        if self._problem.rnn_data:
            named.update(rnn_scale=rnn.scales[0], rnn_shift=rnn.shift)
        elif self._problem.rnn_weights_mask is not None:
            # the scales ride in the plan's table as f32 bits, uploaded at the first execution
            off = self._plan.index(np.asarray(rnn.scales, np.float32).view(np.int32))
            assert off == 0  # the kernel reads the table from its start
            named["rnn_wscale"] = INDEX
        self._plan.reorder(self._problem, Ref(ARG_FROM), Ref(ARG_TO), **named)

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


# -- int8 RNN quantization (oneDNN's rnn_data_reorder_t and rnn_weights_reorder_s8_t) ----------
_WEIGHTS_TAGS = {5: ("ldigo", "ldgoi"), 4: ("ldio", "ldoi")}
_WEIGHTS_MASKS = {5: (0, (1 << 3) + (1 << 4)), 4: (0, 1 << 3)}


@dataclass(frozen=True)
class RnnQuantization:
    """One quantizing RNN reorder: ``rnn_data`` (``x * scale + shift``), ``rnn_weights`` or
    ``rnn_weights_projection`` (``w * scales[index over the masked dims]``)."""

    kind: str
    scales: tuple[float, ...]
    shift: float = 0.0
    mask: int = 0

    def describe(self) -> str:
        if self.kind == "rnn_data":
            return f"scale:{self.scales[0]:g} shift:{self.shift:g}"
        return f"mask:{self.mask} scales:{len(self.scales)}"


def _is_default(qparams) -> bool:
    """oneDNN's has_default_values: data (1, 0); weights every scale 1 (whatever the mask)."""
    if qparams is None:
        return True
    if isinstance(qparams[1], tuple):
        return all(v == 1.0 for v in qparams[1])
    return qparams == (1.0, 0.0)


def _matches(md: MemoryDesc, tag: str) -> bool:
    """Whether ``md`` is ``tag``'s dense layout (offsets aside; size-1 dims have any stride)."""
    if not md.is_plain():
        return False
    ref = MemoryDesc(list(md.dims), md.data_type, tag)
    return all(s == r for s, r, n in zip(md.strides, ref.strides, md.dims) if n > 1)


def rnn_quantization(src_md: MemoryDesc, dst_md: MemoryDesc, attr) -> RnnQuantization | None:
    """The RNN quantization a reorder with ``attr`` applies, or None when the attribute holds
    oneDNN's default RNN parameters. oneDNN's rules (``src/cpu/rnn/rnn_reorders.hpp``):

    - data: f32 -> u8 or s8, both tnc (3 dims) or both ldnc (4 dims), with the data scale and
      shift;
    - weights: f32 (or s8: a copy) -> s8 from dense ldigo / ldgoi (5 dims, weights scales, mask 0
      or 24) or ldio / ldoi (4 dims, projection scales, mask 0 or 8). oneDNN's destination is
      its packed format (``any`` of its RNN); here it is any plain s8 layout, which is what
      pydnnl's int8 RNN reads. A 4-dims f32 -> s8 reorder between dense abcd layouts is data
      in oneDNN; here it is projection weights when the projection scales are set.

    Anything else with RNN parameters raises ``unimplemented``, as no oneDNN reorder takes it.
    """
    data = attr.get_rnn_data_qparams()
    weights = attr.get_rnn_weights_qparams()
    proj = attr.get_rnn_weights_projection_qparams()
    if all(_is_default(q) for q in (data, weights, proj)):
        return None
    got = f"{src_md.short_str()} -> {dst_md.short_str()}"
    if attr.scales or attr.zero_points:
        raise unimplemented(
            "reorder: RNN quantization parameters do not combine with scales or zero points "
            f"(as in oneDNN); got both for {got}")
    f32, u8, s8 = data_type.f32, data_type.u8, data_type.s8
    src_dt, dst_dt, nd = src_md.data_type, dst_md.data_type, len(src_md.dims)
    data_tag = {3: "tnc", 4: "ldnc"}.get(nd)
    # 4-dims f32 -> s8 may be ldnc data or ldio projection weights: the data only when both
    # layouts are ldnc and no projection scales are set
    as_data = (src_dt == f32 and dst_dt in (u8, s8) and data_tag is not None
               and (nd == 3 or dst_dt == u8 or (_is_default(proj) and _matches(src_md, "ldnc")
                                                 and _matches(dst_md, "ldnc"))))
    if as_data:
        for name, md in (("src_md", src_md), ("dst_md", dst_md)):
            if not _matches(md, data_tag):
                raise unimplemented(
                    f"reorder: RNN data quantization needs {data_tag} layouts on both sides "
                    f"(as in oneDNN); {name} is {md.short_str()}")
        scale, shift = data or (1.0, 0.0)
        return RnnQuantization("rnn_data", (scale,), shift)
    if src_dt in (f32, s8) and dst_dt == s8 and nd in _WEIGHTS_TAGS:
        tags = _WEIGHTS_TAGS[nd]
        if not (src_md.is_dense() and any(_matches(src_md, t) for t in tags)):
            data_too = (" (or ldnc layouts on both sides for data)"
                        if nd == 4 and src_dt == f32 and _is_default(proj) else "")
            raise unimplemented(
                f"reorder: RNN weights quantization needs a dense {' or '.join(tags)} src_md"
                f"{data_too} (as in oneDNN), got {src_md.short_str()}")
        if not dst_md.is_plain():
            raise unimplemented(
                f"reorder: RNN weights quantization writes a plain s8 layout (what the int8 "
                f"RNN reads), dst_md is {dst_md.short_str()}")
        what = "set_rnn_weights_qparams" if nd == 5 else "set_rnn_weights_projection_qparams"
        mask, scales = (weights if nd == 5 else proj) or (0, (1.0,))
        if mask not in _WEIGHTS_MASKS[nd]:
            raise unimplemented(
                f"reorder: {what} mask must be one of "
                f"{', '.join(map(str, _WEIGHTS_MASKS[nd]))} for {nd}-dims weights (as in "
                f"oneDNN), got {mask}")
        dims = src_md.dims
        want = 1 if mask == 0 else (dims[3] * dims[4] if nd == 5 else dims[3])
        if len(scales) != want:
            per = "" if mask == 0 else (f" (G * O = {dims[3]} * {dims[4]})" if nd == 5
                                        else f" (O = {dims[3]})")
            raise invalid_arguments(
                f"reorder: {what} with mask {mask} needs {want} scale"
                f"{'s' if want > 1 else ''}{per}, got {len(scales)}")
        return RnnQuantization("rnn_weights" if nd == 5 else "rnn_weights_projection",
                               tuple(scales), mask=mask)
    raise unimplemented(
        f"reorder: RNN quantization parameters apply to f32 -> u8/s8 data (tnc, ldnc) and "
        f"f32 or s8 -> s8 weights (ldigo, ldgoi, ldio, ldoi) reorders (as in oneDNN), got "
        f"{got}")
