"""The pooling primitives (``dnnl::pooling_forward``, ``dnnl::pooling_backward``): max and
average pooling (with or without the padding in the denominator) over 1-D, 2-D and 3-D
spatial data, with strides, dilation (oneDNN's: 0 = dense) and asymmetric padding.

Output size (oneDNN's rule, C division): ``dst = (src - ((k-1)*(d+1)+1) + pad_l + pad_r) /
stride + 1`` per spatial dim; ``pad_l >= 0``, ``pad_r >= -stride``; for
``pooling_avg_exclude_padding`` both paddings must be smaller than the kernel's extent and
the dilation smaller than the source.

Max pooling in ``forward_training`` writes a workspace: dst's dims and layout with data type
u8 (s32 when the kernel holds more than 255 points), one window index ``(kd*KH + kh)*KW + kw``
per dst element, the first of equal maxima (oneDNN's rule); backward routes each gradient
through it. ``forward_inference`` and the averages keep none.

Each plan is one kernel (``pydnnl/kernels/pooling.py``) that reads and writes every layout in
place (plain, strided, blocked such as nChw16c); ``format_tag.any`` for dst follows src's
layout, and for the backward descs the forward hint's. Global pooling forward (one window over
the whole source: the averages, and max without a workspace) runs as a reduction over the
spatial dims (:func:`pydnnl.primitives.reduction.plan_stages`).

Over plain layouts the kernels take the minibatch, the spatial sizes and the strides built
from them as arguments (:func:`~pydnnl.kernels.pooling.runtime_form`), so a new minibatch or
image size of the same layouts, window and channel count reuses the compiled programs: on
CPUs (nchw's width, the lanes' dim, stays baked there: ``heuristics.pooling.runtime_lane_dim``);
GPUs take only the minibatch until the run-time form is measured again there
(``heuristics.pooling.runtime_spatial``).

Forward takes oneDNN v3's post-ops for pooling, eltwise and binary entries (an f32 operand
``ARG_ATTR_MULTIPLE_POST_OP(i) | ARG_SRC_1`` whose dims equal dst's or are 1), applied in the
kernel's store (global pooling then runs the pooling kernel, not the reduction); backward
takes no attributes (as in oneDNN).
"""
from __future__ import annotations

from dataclasses import replace

from ..constants import (
    ARG_DIFF_DST,
    ARG_DIFF_SRC,
    ARG_DST,
    ARG_SRC,
    ARG_WORKSPACE,
    algorithm,
    prop_kind,
)
from ..error import invalid_arguments, unimplemented
from ..kernels.binary import broadcast_layout
from ..kernels.pooling import (
    PoolProblem,
    build_pooling,
    concrete_range,
    image_rows,
    interior_lanes,
    iteration_axes,
    lane_count,
    lanes_of,
    row_launches,
    runtime_form,
)
from ..kernels.post_ops import describe as describe_post_ops
from ..kernels.post_ops import src1_name
from ..kernels.reorder import layout_of
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from ..runtime.heuristics.pooling import (
    runtime_lane_dim,
    runtime_spatial,
    split_interior,
    work_group_size,
)
from ..runtime.plan import Plan, Ref
from .base import ArgSpec, primitive, primitive_desc_base
from .post_ops import binary_arg
from .post_ops import resolve as resolve_post_ops
from .reduction import plan_stages, stages_plan
from .signature import BOOL, DIMS, Signature, bind

__all__ = ["pooling_forward", "pooling_backward"]

_ALG = {algorithm.pooling_max: "max", algorithm.pooling_avg_include_padding: "avg_p",
        algorithm.pooling_avg_exclude_padding: "avg_np"}
_PARAMS = ("strides", "kernel", "dilation", "padding_l", "padding_r")
_INT32_MAX = 2 ** 31 - 1
_DTYPES = (data_type.f32, data_type.bf16, data_type.f16)


def pooling_output_size(i: int, k: int, s: int, d: int, pl: int, pr: int) -> int:
    """oneDNN's output size of one spatial dim (C's truncating division)."""
    num = i - ((k - 1) * (d + 1) + 1) + pl + pr
    return int(num / s) + 1 if num < 0 else num // s + 1


def _signature(name: str, fwd: bool) -> Signature:
    descs = ("src_desc", "dst_desc") if fwd else ("diff_src_desc", "diff_dst_desc")
    return Signature(
        f"{name}.primitive_desc",
        head=("engine",) + (("prop_kind",) if fwd else ()) + ("algorithm",),
        forms=(descs + _PARAMS,),
        tail=(() if fwd else ("hint_fwd_pd",)) + ("attr", "allow_empty"),
        aliases={"aengine": "engine", "aprop_kind": "prop_kind", "aalgorithm": "algorithm",
                 "dilations": "dilation", "dilates": "dilation"},
        kinds={**{n: DIMS for n in _PARAMS}, "allow_empty": BOOL},
        defaults={"allow_empty": False})


def _like(ref: MemoryDesc, dims, dt: data_type) -> MemoryDesc:
    """A dense desc of ``dims`` and type ``dt`` laid out as ``ref`` (its tag, else its stride
    order)."""
    if ref.tag is not None and ref.tag.canonical is not None:
        try:
            return MemoryDesc(dims, dt, ref.tag)
        except invalid_arguments:
            pass
    nd = len(dims)
    if ref.inner_blks:
        return MemoryDesc(dims, dt, "abcde"[:nd])
    order = sorted(range(nd), key=lambda d: (-ref.strides[d], d))  # outermost first
    strides, run = [0] * nd, 1
    for d in reversed(order):
        strides[d] = run
        run *= dims[d]
    return MemoryDesc(dims, dt, strides)


def _five(layout: tuple, nsp: int) -> tuple:
    """A layout tuple over (N, C, D, H, W): unit dims (stride 0) where the problem has none."""
    off, per_dim = layout
    return (off, per_dim[:2] + ((1, 0, ()),) * (3 - nsp) + per_dim[2:])


def _pad3(v, nsp: int, fill: int) -> tuple[int, int, int]:
    return (fill,) * (3 - nsp) + tuple(v)


class _pool_pd_base(primitive_desc_base):
    """Validation, layouts and queries shared by the forward and backward descriptors."""

    _fwd = True

    def _setup(self, a: dict, hint=None) -> None:
        kind = self._kind
        names = ("src_desc", "dst_desc") if self._fwd else ("diff_src_desc", "diff_dst_desc")
        try:
            self._alg = algorithm(a["algorithm"])
        except (ValueError, TypeError):
            self._alg = None
        if self._alg not in _ALG:
            raise invalid_arguments(
                f"{kind}: algorithm must be pooling_max, pooling_avg_include_padding or "
                f"pooling_avg_exclude_padding, got {a['algorithm']!r}")
        src, dst = a[names[0]], a[names[1]]
        for n, md in zip(names, (src, dst)):
            if not isinstance(md, MemoryDesc) or md.is_zero():
                raise invalid_arguments(f"{kind}: {n} must be a memory.desc, got {md!r}")
            if len(md.dims) not in (3, 4, 5):
                raise invalid_arguments(
                    f"{kind}: {n} must have 3, 4 or 5 dimensions [N, C, (D,) (H,) W], got "
                    f"{list(md.dims)}")
        if len(src.dims) != len(dst.dims):
            raise invalid_arguments(f"{kind}: {names[0]} dims {list(src.dims)} and {names[1]} "
                                    f"dims {list(dst.dims)} must have as many dimensions")
        for i, what in ((0, "N"), (1, "C")):
            if src.dims[i] != dst.dims[i]:
                raise invalid_arguments(
                    f"{kind}: {names[1]} dims {list(dst.dims)} must have {names[0]}'s {what} = "
                    f"{src.dims[i]} in dimension {i}, got {dst.dims[i]}")
        nsp = len(src.dims) - 2
        p = {}
        for n in _PARAMS:
            v = a[n]
            if not DIMS.accepts(v) or len(v) != nsp:
                raise invalid_arguments(
                    f"{kind}: {n} must be a list of {nsp} ints (one per spatial dim), got {v!r}")
            p[n] = tuple(int(x) for x in v)
        ext = []
        for j in range(nsp):
            s, k, d, pl, pr = (p[n][j] for n in _PARAMS)
            i, o = src.dims[2 + j], dst.dims[2 + j]
            if s < 1:
                raise invalid_arguments(f"{kind}: strides[{j}] must be >= 1, got {s}")
            if k < 1:
                raise invalid_arguments(f"{kind}: kernel[{j}] must be >= 1, got {k}")
            if d < 0:
                raise invalid_arguments(f"{kind}: dilation[{j}] must be >= 0 (0 = dense), "
                                        f"got {d}")
            if pl < 0:
                raise invalid_arguments(f"{kind}: padding_l[{j}] must be >= 0, got {pl}")
            if pr + s < 0:
                raise invalid_arguments(f"{kind}: padding_r[{j}] must be >= -strides[{j}] = "
                                        f"{-s}, got {pr}")
            want = pooling_output_size(i, k, s, d, pl, pr)
            if o != want:
                raise invalid_arguments(
                    f"{kind}: {names[1]} spatial dim {j} is {o}, expected (src - ((k-1)*(d+1)+1)"
                    f" + pad_l + pad_r) / stride + 1 = ({i} - {(k - 1) * (d + 1) + 1} + {pl} + "
                    f"{pr}) / {s} + 1 = {want}")
            e = (k - 1) * (d + 1) + 1
            ext.append(e)
            if self._alg == algorithm.pooling_avg_exclude_padding and not (
                    pl < e and pr < e and d < i):
                raise invalid_arguments(
                    f"{kind}: pooling_avg_exclude_padding needs padding_l[{j}] = {pl} and "
                    f"padding_r[{j}] = {pr} below the kernel extent {e} and dilation[{j}] = {d} "
                    f"below the source size {i} (a window wholly in the padding averages 0/0)")
        for n, md in zip(names, (src, dst)):
            if md.data_type not in _DTYPES:
                raise unimplemented(f"{kind}: {n} data type {md.data_type.name}; f32, bf16 "
                                    f"and f16 are implemented")
        at = self._attr
        self._post_ops = ()
        if not self._fwd and (len(at.get_post_ops()) or at.scales or at.zero_points):
            raise unimplemented(f"{kind}: attr with post-ops, scales or zero points (got "
                                f"{at.key()!r}); oneDNN defines none for backward "
                                f"propagation (pooling_forward takes post-ops)")
        if at.scales or at.zero_points:
            raise unimplemented(f"{kind}: attr with scales or zero points (got {at.key()!r}); "
                                f"oneDNN's pooling takes eltwise and binary post-ops only")
        self._p, self._nsp = p, nsp
        self._src_names = names
        self._resolve(src, dst, hint)

    # -- queries ------------------------------------------------------------------------------
    def get_algorithm(self) -> algorithm:
        return self._alg

    def get_prop_kind(self) -> prop_kind:
        return self._prop

    def get_strides(self) -> list[int]:
        return list(self._p["strides"])

    def get_kernel(self) -> list[int]:
        return list(self._p["kernel"])

    def get_dilations(self) -> list[int]:
        return list(self._p["dilation"])

    def get_padding_l(self) -> list[int]:
        return list(self._p["padding_l"])

    def get_padding_r(self) -> list[int]:
        return list(self._p["padding_r"])

    # -- shared ------------------------------------------------------------------------------
    def _ws_desc(self, dst: MemoryDesc) -> MemoryDesc:
        points = 1
        for k in self._p["kernel"]:
            points *= k
        return dst.with_data_type(data_type.u8 if points <= 255 else data_type.s32)

    def _describe(self, src: MemoryDesc, dst: MemoryDesc) -> None:
        sp = "dhw"[3 - self._nsp:]
        text = f"mb{src.dims[0]}ic{src.dims[1]}"
        for what, vals in (("i", src.dims[2:]), ("o", dst.dims[2:]), ("k", self._p["kernel"]),
                           ("s", self._p["strides"]), ("p", self._p["padding_l"]),
                           ("d", self._p["dilation"])):
            text += "".join(f"{what}{a}{v}" for a, v in zip(sp, vals))
        self._info = f"alg:{_ALG[self._alg]} {text}" + (
            f" attr-post-ops:{describe_post_ops(self._post_ops)}" if self._post_ops else "")
        self._impl = "ocl:pool"

    def _problem(self, engine, direction: str, src: MemoryDesc, dst: MemoryDesc,
                 ws: MemoryDesc | None) -> PoolProblem:
        nsp = self._nsp
        out = dst if direction == "fwd" else src
        c_iter = out.padded_dims[1]
        out_dims = (out.dims[0], c_iter) + _pad3(out.dims[2:], nsp, 1)
        out_layout = _five(layout_of(out), nsp)
        big = max(m.nelems_physical() for m in (src, dst) if m is not None)
        prob = PoolProblem(
            direction=direction, alg=_ALG[self._alg],
            workspace=None if ws is None else ("uchar" if ws.data_type == data_type.u8
                                               else "int"),
            n=src.dims[0], c=src.dims[1], c_iter=c_iter,
            src_sp=_pad3(src.dims[2:], nsp, 1), dst_sp=_pad3(dst.dims[2:], nsp, 1),
            kernel=_pad3(self._p["kernel"], nsp, 1), strides=_pad3(self._p["strides"], nsp, 1),
            dilation=_pad3(self._p["dilation"], nsp, 0),
            pad_l=_pad3(self._p["padding_l"], nsp, 0),
            src_layout=_five(layout_of(src), nsp), dst_layout=_five(layout_of(dst), nsp),
            ws_layout=None if ws is None else _five(layout_of(ws), nsp),
            axes=iteration_axes(out_layout, out_dims), wide=big > _INT32_MAX // 2,
            src_dt=src.data_type.name, dst_dt=dst.data_type.name,
            post_ops=self._kernel_chain(dst) if direction == "fwd" else ())
        return self._sized(engine, prob)

    def _kernel_chain(self, dst: MemoryDesc) -> tuple:
        """The post-op chain with each binary operand's layout over the kernel's five dims
        (a broadcast dim a zero term)."""
        out = []
        for i, op in enumerate(self._post_ops):
            if op[0] == "binary":
                md = self._args[binary_arg(i)].md
                lay = _five(broadcast_layout(layout_of(md), md.dims, dst.dims), self._nsp)
                op = ("binary", op[1], lay, (), 0)
            out.append(op)
        return tuple(out)

    @staticmethod
    def _sized(engine, prob: PoolProblem) -> PoolProblem:
        ln = lanes_of(prob)
        return replace(prob, local=work_group_size(engine.info, lane_count(prob), ln.rest))

    def _parts(self, engine, prob: PoolProblem) -> list[PoolProblem]:
        """The kernels of ``prob``: one over every lane, or (where the device takes it) one
        over the interior lanes with vector loads and one over the edge lanes."""
        if split_interior(engine.info) and interior_lanes(prob) is not None:
            return [self._sized(engine, replace(prob, part=part))
                    for part in ("interior", "edges")]
        return [prob]

    def _kernels(self, engine, prob: PoolProblem) -> list[tuple[PoolProblem, dict]]:
        """``(problem, size values)`` of each launch of ``prob``'s kernels (:meth:`_parts`):
        the run-time form over plain layouts (its work-group shape the rule's for any number
        of rows, at most the rows; one or two launches of whole groups of rows,
        :func:`~pydnnl.kernels.pooling.row_launches`), else the baked problem and no
        values."""
        info = engine.info
        out = []
        for part in self._parts(engine, prob):
            found = runtime_form(part, keep_lane_dim=not runtime_lane_dim(info),
                                 spatial=runtime_spatial(info))
            if found is None:
                out.append((part, {}))
                continue
            q, values = found
            lanes, rows = concrete_range(q, values)
            l0, l1 = work_group_size(info, lanes, rows, runtime=True)
            per = image_rows(q)
            if per is not None and per % l1 == 0:
                # every row count (images times ``per``) is whole groups: one launch, no row
                # offset (the CPUs' minibatch-only kernels: the baked kernel's code)
                q = replace(q, rt_r0=None)
                values = {k: v for k, v in values.items() if k != "pool_r0"}
            else:  # whole groups of rows (row_launches): at most the rows
                l1 = min(l1, 1 << (max(rows, 1).bit_length() - 1))
            q = replace(q, local=(l0, l1))
            out += [(q, v) for v in row_launches(q, values)]
        return out


class pooling_forward(primitive):
    """Max or average pooling, forward (f32, bf16, f16 data; f32 arithmetic)."""

    class primitive_desc(_pool_pd_base):
        """``pooling_forward.primitive_desc(engine, prop_kind, algorithm, src_desc, dst_desc,
        strides, kernel, dilation, padding_l, padding_r, attr=None, allow_empty=False)``."""

        _kind = "pooling_forward"
        signature = _signature("pooling_forward", True)

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            self._init_base(a["engine"], a["attr"])
            try:
                self._prop = prop_kind(a["prop_kind"])
            except (ValueError, TypeError):
                self._prop = None
            if self._prop not in (prop_kind.forward_training, prop_kind.forward_inference):
                raise invalid_arguments(f"pooling_forward: prop_kind must be forward_training "
                                        f"or forward_inference, got {a['prop_kind']!r}")
            src = a["src_desc"]
            if isinstance(src, MemoryDesc) and src.is_any():
                raise invalid_arguments("pooling_forward: src_desc must have a concrete layout, "
                                        "got format_tag.any (oneDNN lets only dst follow src)")
            self._setup(a)

        def _resolve(self, src, dst, hint) -> None:
            if dst.is_any():
                dst = _like(src, dst.dims, dst.data_type)
            self._post_ops, po_args = resolve_post_ops(self._kind, self._attr, dst,
                                                       allowed=("binary", "eltwise"))
            self._args[ARG_SRC] = ArgSpec(src, False)
            self._args[ARG_DST] = ArgSpec(dst, True)
            self._args.update(po_args)
            if self._alg == algorithm.pooling_max and self._prop == prop_kind.forward_training:
                self._args[ARG_WORKSPACE] = ArgSpec(self._ws_desc(dst), True)
            self._describe(src, dst)
            self._red = self._global_reduction(src, dst)
            scratch = 0
            if self._red is not None:
                stages, scratch, impl = self._red
                self._impl = "ocl:pool:" + impl.removeprefix("ocl:")
            else:
                ws = self._args.get(ARG_WORKSPACE)
                eng = self.get_engine()
                prob = self._problem(eng, "fwd", src, dst, ws.md if ws else None)
                if len(self._parts(eng, prob)) > 1:
                    self._impl = "ocl:pool:interior+edges"
            self._finish_scratchpad(scratch * 4)

        def _global_reduction(self, src: MemoryDesc, dst: MemoryDesc):
            """Global pooling (one window covering the whole source, no padding inside it) of
            the averages, or of max without a workspace, is a reduction over the spatial dims:
            its stages (:func:`~pydnnl.primitives.reduction.plan_stages`), else None. (Its
            contiguous rows, nchw's 7x7 = 49 values, are read with vector loads on CPUs and
            packed several per work-group on GPUs, where the pooling kernel's lanes along a
            width of 7 wasted most of each vector.)"""
            p = self._p
            if self._post_ops:  # the pooling kernel fuses them; the reduction takes none
                return None
            if (any(tuple(m.padded_dims) != tuple(m.dims) for m in (src, dst))
                    or tuple(p["kernel"]) != tuple(src.dims[2:])
                    or any(v != 1 for v in dst.dims[2:])
                    or any(p["padding_l"]) or any(p["dilation"])):
                return None
            if self._alg == algorithm.pooling_max and ARG_WORKSPACE in self._args:
                return None
            name = "max" if self._alg == algorithm.pooling_max else "mean"
            return plan_stages(self.get_engine().info, name, 1.0, 0.0, src, dst)

    def _create(self) -> None:
        pd = self._pd
        if pd._red is not None:
            stages, scratch, _ = pd._red
            self._plan = stages_plan(pd.get_engine(), pd._kind, stages, scratch)
            return
        src, dst = pd._args[ARG_SRC].md, pd._args[ARG_DST].md
        ws = pd._args.get(ARG_WORKSPACE)
        prob = pd._problem(pd.get_engine(), "fwd", src, dst, ws.md if ws else None)
        plan = self._plan = Plan(pd.get_engine(), pd._kind)
        named = {"src": Ref(ARG_SRC), "dst": Ref(ARG_DST)}
        if ws is not None:
            named["ws"] = Ref(ARG_WORKSPACE)
        named.update({src1_name(i): Ref(binary_arg(i)) for i, op in enumerate(pd._post_ops)
                      if op[0] == "binary"})
        for part, sizes in pd._kernels(pd.get_engine(), prob):
            plan.kernel("pooling", part, build_pooling, **named, **sizes)

    def _execute(self, s, args) -> None:
        self._plan.execute(s, args)


class pooling_backward(primitive):
    """Max or average pooling, backward data (f32, bf16, f16 data): ``diff_src`` from
    ``diff_dst`` (and the forward's workspace for max pooling)."""

    class primitive_desc(_pool_pd_base):
        """``pooling_backward.primitive_desc(engine, algorithm, diff_src_desc, diff_dst_desc,
        strides, kernel, dilation, padding_l, padding_r, hint_fwd_pd, attr=None,
        allow_empty=False)``."""

        _kind = "pooling_backward"
        _fwd = False
        signature = _signature("pooling_backward", False)

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            self._init_base(a["engine"], a["attr"])
            self._prop = prop_kind.backward_data
            hint = a["hint_fwd_pd"]
            if not isinstance(hint, pooling_forward.primitive_desc):
                raise invalid_arguments(f"pooling_backward: hint_fwd_pd must be a "
                                        f"pooling_forward.primitive_desc, got "
                                        f"{type(hint).__qualname__}")
            self._setup(a, hint)

        def _resolve(self, diff_src, diff_dst, hint) -> None:
            kind = self._kind
            h_src, h_dst = hint.src_desc(), hint.dst_desc()
            if hint.get_algorithm() != self._alg:
                raise invalid_arguments(f"{kind}: hint_fwd_pd was created for "
                                        f"{hint.get_algorithm().name}, this descriptor for "
                                        f"{self._alg.name}")
            for n in _PARAMS:
                if tuple(hint._p[n]) != self._p[n]:
                    raise invalid_arguments(f"{kind}: {n} {list(self._p[n])} differ from "
                                            f"hint_fwd_pd's {list(hint._p[n])}")
            for n, md, h in (("diff_src_desc", diff_src, h_src), ("diff_dst_desc", diff_dst,
                                                                  h_dst)):
                if tuple(md.dims) != tuple(h.dims):
                    raise invalid_arguments(f"{kind}: {n} dims {list(md.dims)} differ from "
                                            f"hint_fwd_pd's {list(h.dims)}")
            if diff_dst.is_any():
                diff_dst = h_dst.with_data_type(diff_dst.data_type)
            if diff_src.is_any():
                diff_src = h_src.with_data_type(diff_src.data_type)
            self._args[ARG_DIFF_DST] = ArgSpec(diff_dst, False)
            if self._alg == algorithm.pooling_max:
                ws = hint.workspace_desc()
                if ws.is_zero():
                    raise invalid_arguments(
                        f"{kind}: max pooling backward reads the forward's workspace, but "
                        f"hint_fwd_pd was created for {hint.get_prop_kind().name}, which keeps "
                        f"none; create it with forward_training")
                self._args[ARG_WORKSPACE] = ArgSpec(ws, False)
            self._args[ARG_DIFF_SRC] = ArgSpec(diff_src, True)
            self._describe(diff_src, diff_dst)
            ws = self._args.get(ARG_WORKSPACE)
            eng = self.get_engine()
            prob = self._problem(eng, "bwd", diff_src, diff_dst, ws.md if ws else None)
            if len(self._parts(eng, prob)) > 1:
                self._impl = "ocl:pool:interior+edges"
            self._finish_scratchpad(0)

    def _create(self) -> None:
        pd = self._pd
        dsrc, ddst = pd._args[ARG_DIFF_SRC].md, pd._args[ARG_DIFF_DST].md
        ws = pd._args.get(ARG_WORKSPACE)
        prob = pd._problem(pd.get_engine(), "bwd", dsrc, ddst, ws.md if ws else None)
        plan = self._plan = Plan(pd.get_engine(), pd._kind)
        named = {"diff_dst": Ref(ARG_DIFF_DST), "diff_src": Ref(ARG_DIFF_SRC)}
        if ws is not None:
            named["ws"] = Ref(ARG_WORKSPACE)
        for part, sizes in pd._kernels(pd.get_engine(), prob):
            plan.kernel("pooling", part, build_pooling, **named, **sizes)

    def _execute(self, s, args) -> None:
        self._plan.execute(s, args)
