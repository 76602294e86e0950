"""The batch normalization primitives (``dnnl::batch_normalization_forward`` and
``dnnl::batch_normalization_backward``, oneDNN v3):

``dst[n, c, sp] = gamma[c] * (src[n, c, sp] - mean[c]) / sqrt(variance[c] + eps) + beta[c]``

with mean and the biased (1/N) variance per channel over N and the spatial dims, computed
(outputs in forward training, scratch only in forward inference) or given
(``use_global_stats``); ``use_scale`` / ``use_shift`` take gamma / beta as separate
``[C]`` tensors (``ARG_SCALE``, ``ARG_SHIFT``); ``fuse_norm_relu`` clamps at zero and, in
training, writes a one-byte-per-element mask (``ARG_WORKSPACE``) that the backward reads;
``fuse_norm_add_relu`` adds ``ARG_SRC_1`` (dst's desc: ``dst_desc(3)``) before that ReLU
(with both flags, one ReLU after the addition, as oneDNN).
Backward: ``backward`` gives diff_src and, with the flags, diff_scale / diff_shift;
``backward_data`` gives diff_src only; with ``use_global_stats`` the statistics are
constants of the gradient; ``fuse_norm_add_relu`` also gives ``ARG_DIFF_SRC_1``, the
masked diff_dst (diff_dst's desc: ``diff_dst_desc(1)``).

Plan (every tensor read and written in its own layout, blocked ones included): a channel
reduction into partial sums in the scratchpad (forward: shifted sums of x and x^2; backward:
sums of dy and dy * (x - mean)), a per-channel kernel turning them into the statistics or
the parameter gradients and four coefficients, and one elementwise pass.
"""
from __future__ import annotations

import math
import numbers

from ..constants import (
    ARG_DIFF_DST,
    ARG_DIFF_SCALE,
    ARG_DIFF_SHIFT,
    ARG_DIFF_SRC,
    ARG_DIFF_SRC_1,
    ARG_DST,
    ARG_MEAN,
    ARG_SCALE,
    ARG_SHIFT,
    ARG_SRC,
    ARG_SRC_1,
    ARG_VARIANCE,
    ARG_WORKSPACE,
    normalization_flags,
    prop_kind,
    query,
)
from ..error import invalid_arguments, unimplemented
from ..kernels.normalization import (
    BnApply,
    BnFinalize,
    BnFused,
    BnReduce,
    bn_apply_shape,
    bn_apply_vec_ok,
    bn_finalize_runtime,
    bn_fused_run,
    bn_reduce_partials,
    bn_reduce_runtime,
    bn_runtime_groups,
    build_bn_apply,
    build_bn_finalize,
    build_bn_fused,
    build_bn_reduce,
    logical_layout,
    min_stride,
)
from ..kernels.reorder import layout_of
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from ..runtime.heuristics import normalization as rules
from ..runtime.plan import ALIGN, SCRATCH, Plan, Ref
from .base import ArgSpec, primitive, primitive_desc_base
from .signature import NUMBER, Kind, Signature, bind

__all__ = ["batch_normalization_forward", "batch_normalization_backward"]

_ALL_FLAGS = 0x1F  # oneDNN's normalization flags, fuse_norm_add_relu (0x10) included
_BN_DTYPES = (data_type.f32, data_type.bf16, data_type.f16)  # data; statistics stay f32
_FLAG_NAMES = {0x1: "use_global_stats", 0x2: "use_scale", 0x4: "use_shift",
               0x8: "fuse_norm_relu", 0x10: "fuse_norm_add_relu"}
_NAMES = {ARG_SRC: "src_desc", ARG_DST: "dst_desc", ARG_DIFF_SRC: "diff_src_desc",
          ARG_DIFF_DST: "diff_dst_desc"}

FLAGS = Kind("flags", "a normalization_flags value (int)",
             lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool))


def check_flags(kind: str, flags, allowed: int, unimpl: int = 0x10) -> normalization_flags:
    """``flags`` as :class:`normalization_flags`; bits outside ``allowed`` are refused
    (as unimplemented where they are within ``unimpl``, else as invalid)."""
    if not isinstance(flags, numbers.Integral) or isinstance(flags, bool):
        raise invalid_arguments(f"{kind}: flags must be normalization_flags, got {flags!r}")
    flags = int(flags)
    if flags & ~_ALL_FLAGS or flags < 0:
        raise invalid_arguments(f"{kind}: flags {flags:#x} has bits that are no "
                                f"normalization_flags (known: {_ALL_FLAGS:#x})")
    if flags & ~allowed:
        bad = flags & ~allowed
        names = [n for bit, n in _FLAG_NAMES.items() if bad & bit]
        raise (unimplemented if bad & ~unimpl == 0 else invalid_arguments)(
            f"{kind}: flags {bad:#x} ({' | '.join(names)}) not supported here; allowed: "
            f"{' | '.join(n for bit, n in _FLAG_NAMES.items() if allowed & bit)}")
    return normalization_flags(flags)


def check_epsilon(kind: str, eps) -> float:
    if not isinstance(eps, numbers.Real) or isinstance(eps, bool) or not math.isfinite(eps) \
            or eps < 0:
        raise invalid_arguments(f"{kind}: epsilon must be a finite number >= 0, got {eps!r}")
    return float(eps)


def check_data_desc(kind: str, name: str, md, lo: int, hi: int, allow_any: bool,
                    dtypes: tuple = (data_type.f32,)) -> None:
    if not isinstance(md, MemoryDesc) or md.is_zero():
        raise invalid_arguments(f"{kind}: {name} must be a memory.desc, got {md!r}")
    if md.is_any() and not allow_any:
        raise invalid_arguments(f"{kind}: {name} must have a concrete layout, got "
                                f"format_tag.any")
    if len(md.dims) < lo:
        raise invalid_arguments(f"{kind}: {name} must have at least {lo} dimensions, got "
                                f"{list(md.dims)}")
    if len(md.dims) > hi:
        raise unimplemented(f"{kind}: {name} with {len(md.dims)} dimensions; up to {hi} are "
                            f"implemented")
    if min(md.dims) < 1:
        raise unimplemented(f"{kind}: {name} has a zero dimension {list(md.dims)}")
    if md.data_type not in dtypes:
        names = " and ".join([", ".join(d.name for d in dtypes[:-1]), dtypes[-1].name]
                             if len(dtypes) > 1 else [dtypes[0].name])
        raise unimplemented(f"{kind}: {name} data type {md.data_type.name}; only {names} "
                            f"{'is' if len(dtypes) == 1 else 'are'} implemented")
    if not md.is_any() and md.nelems_physical() >= 2 ** 31:
        raise unimplemented(f"{kind}: {name} spans {md.nelems_physical()} elements; kernels "
                            f"index with 32-bit ints")


def check_attr(kind: str, attr) -> None:
    if len(attr.get_post_ops()) or attr.scales or attr.zero_points:
        raise unimplemented(f"{kind}: attr with post-ops, scales or zero points is not "
                            f"implemented (use fuse_norm_relu for a fused ReLU)")


def follow(md: MemoryDesc, like: MemoryDesc, keep_type: bool = False) -> MemoryDesc:
    """``md`` with ``format_tag.any`` resolved to ``like``'s layout (oneDNN's rule for dst
    and the gradients), in f32 or, with ``keep_type``, ``md``'s data type; a concrete ``md``
    stays."""
    if not md.is_any():
        return md
    dt = md.data_type if keep_type else data_type.f32
    if like.offset0 == 0 and like.is_dense():
        return like.with_data_type(dt)
    return MemoryDesc(like.dims, dt, "abcdefghijkl"[:len(like.dims)])


def same_dims(kind: str, name: str, md: MemoryDesc, ref_name: str, ref: MemoryDesc) -> None:
    if tuple(md.dims) != tuple(ref.dims):
        raise invalid_arguments(f"{kind}: {name} dims {list(md.dims)} must equal {ref_name} "
                                f"dims {list(ref.dims)}")


def parse_prop(kind: str, value, allowed: tuple) -> prop_kind:
    try:
        p = prop_kind(value)
    except (ValueError, TypeError):
        raise invalid_arguments(f"{kind}: aprop_kind must be a prop_kind, got "
                                f"{value!r}") from None
    if p not in allowed:
        raise invalid_arguments(f"{kind}: aprop_kind must be "
                                f"{' or '.join(a.name for a in allowed)}, got {p.name}")
    return p


class _bn_pd(primitive_desc_base):
    """Queries shared by both descriptors."""

    def get_prop_kind(self) -> prop_kind:
        return self._prop

    def get_epsilon(self) -> float:
        return self._eps

    def get_flags(self) -> normalization_flags:
        return self._flags

    def mean_desc(self) -> MemoryDesc:
        spec = self._args.get(ARG_MEAN)
        return spec.md if spec else MemoryDesc()

    def variance_desc(self) -> MemoryDesc:
        spec = self._args.get(ARG_VARIANCE)
        return spec.md if spec else MemoryDesc()

    def weights_desc(self, index: int = 0) -> MemoryDesc:
        """The ``[C]`` desc of scale and shift (zero without use_scale/use_shift)."""
        spec = self._args.get(ARG_SCALE) or self._args.get(ARG_SHIFT)
        return spec.md if spec and index == 0 else MemoryDesc()

    def diff_weights_desc(self, index: int = 0) -> MemoryDesc:
        spec = self._args.get(ARG_DIFF_SCALE) or self._args.get(ARG_DIFF_SHIFT)
        return spec.md if spec and index == 0 else MemoryDesc()

    def query_md(self, what, index: int = 0) -> MemoryDesc:
        what = query(what)
        if what == query.weights_md:
            return self.weights_desc(index)
        if what == query.diff_weights_md:
            return self.diff_weights_desc(index)
        if what == query.src_md and index in (1, 2):
            if not self._stats_in:  # not ARG_SRC_1 (argument 2): oneDNN's dst_md(3)
                return MemoryDesc()
            return self.mean_desc() if index == 1 else self.variance_desc()
        if what == query.dst_md and index in (1, 2) and not self._stats_in:
            return self.mean_desc() if index == 1 else self.variance_desc()
        if what == query.dst_md and index == 3 or what == query.diff_dst_md and index == 1:
            # oneDNN: fuse_norm_add_relu's src_1 is dst_md(3), diff_src_1 diff_dst_md(1)
            spec = self._args.get(ARG_SRC_1 if what == query.dst_md else ARG_DIFF_SRC_1)
            return spec.md if spec else MemoryDesc()
        if what == query.diff_src_md and index > 0:  # nor ARG_DIFF_SRC_1 (argument 130)
            return MemoryDesc()
        return super().query_md(what, index)

    _ALLOWED, _UNIMPL = 0x1F, 0x00
    _ARG_LABELS = {ARG_SRC_1: "ARG_SRC_1", ARG_DIFF_SRC_1: "ARG_DIFF_SRC_1"}

    def _common(self, a: dict) -> None:
        self._eps = check_epsilon(self._kind, a["epsilon"])
        self._flags = check_flags(self._kind, a["flags"], self._ALLOWED, self._UNIMPL)
        check_attr(self._kind, self._attr)
        f = self._flags
        self.global_stats = bool(f & normalization_flags.use_global_stats)
        self.use_scale = bool(f & normalization_flags.use_scale)
        self.use_shift = bool(f & normalization_flags.use_shift)
        # fuse_norm_add_relu: src_1 added before the ReLU, whose mask gates the gradient
        self.add = bool(f & normalization_flags.fuse_norm_add_relu)
        self.relu = self.add or bool(f & normalization_flags.fuse_norm_relu)

    def _reduce_params(self, md: MemoryDesc) -> None:
        dims = md.dims
        C, R = dims[1], math.prod(dims) // dims[1]
        lay = layout_of(md)
        c_inner = all(min_stride(lay, 1) <= min_stride(lay, d)
                      for d in range(len(dims)) if d != 1 and dims[d] > 1)
        info = self._engine.info
        self.lanes, self.red_wg, self.groups = rules.bn_reduce_params(info, C, R, c_inner)
        self.red_vec, self.red_vec_k = 0, 1
        # the backward's ReLU workspace is dense in logical order, not along nhwc's channels
        ws = self._kind == "batch_normalization_backward" and self.relu
        if self.lanes == "c" and not ws:
            vec, k, groups = rules.bn_reduce_vec(info, C, R)
            if vec:
                self.red_vec, self.red_vec_k, self.groups = vec, k, groups
        self.tree = rules.bn_reduce_tree(info, self.lanes)
        self.small_wg = rules.small_wg(info, C)
        self.apply_wg = rules.apply_wg(info)
        self.apply_rows = rules.apply_rows_per_item(info)
        self.apply_vec = rules.bn_apply_vec(info)

    def _fuse(self, dims, lays: list, mds: list) -> bool:
        """Whether the statistics and the elementwise pass run as one kernel per channel
        (``BnFused``, ``rules.bn_fused``); sets its work-group shape."""
        C = dims[1]
        R = math.prod(dims) // C
        run = bn_fused_run(tuple(dims), lays)
        per_channel = R * sum(md.data_type.itemsize for md in mds)
        use, self.fused_wg, self.fused_sub = rules.bn_fused(self._engine.info, C, per_channel,
                                                            run)
        self.fused = use
        if use:
            self.red, self.partials = None, 0
            self._scratch(C, False)
        return use

    def _plan_reduce(self, red: BnReduce | None) -> None:
        """Keep the reduction problem and size the scratchpad: its partial sums (when
        reducing) and four coefficients per channel."""
        self.red = red
        self.partials = bn_reduce_partials(red) if red is not None else 0
        self._scratch(self._args[ARG_SRC].md.dims[1], red is not None)

    def _scratch(self, C: int, reduce: bool) -> None:
        part = -(-(self.partials * C * 2) // ALIGN) * ALIGN if reduce else 0
        self.p_off, self.k_off = 0, part
        self._scratch_elems = part + 4 * C
        self._finish_scratchpad(self._scratch_elems * 4)


def _runtime(dims, lays: list, **named) -> tuple[dict, dict]:
    """Fields and size arguments of the run-time form of a fused or elementwise kernel over
    plain ``lays`` (x, out[, dy][, ws]): the minibatch and spatial sizes and the strides
    they enter become kernel arguments (:func:`bn_runtime_groups`), so a new minibatch or
    image size of the same layouts reuses the program; the ``named`` layouts (x, out, dy)
    come back reduced to their offsets (the groups hold their strides). ``({}, {})``
    (baked) for blocked layouts."""
    found = bn_runtime_groups(tuple(dims), lays)
    if found is None:
        return {}, {}
    groups, values = found
    stripped = {k: (v[0], ()) for k, v in named.items() if v is not None}
    return {"dims": (-1, dims[1]) + (-1,) * (len(dims) - 2), "groups": groups,
            **stripped}, values


def _apply(pd, dims, lays: list, **fields) -> tuple[BnApply, dict]:
    """The elementwise pass's problem (run-time form over plain layouts) and its size
    arguments."""
    vec = pd.apply_vec if bn_apply_vec_ok(dims, fields["x"], fields["out"], fields.get("dy"),
                                          fields.get("ws", False)) else 0
    if fields.get("add") and fields.get("dy") is not None:
        vec = 0
    rt, values = _runtime(dims, lays, **{k: fields[k] for k in ("x", "out", "dy")
                                         if k in fields})
    if vec:
        return BnApply(**{"dims": tuple(dims), **fields, **rt, "vec": vec,
                          "vec_values": rules.BN_APPLY_VEC_VALUES}), values
    if rt:
        inner, outer = rt["groups"][-1], rt["groups"][:-1]
        o = math.prod(int(g[0]) if g[1] else values[f"bn_g{k}"] for k, g in enumerate(outer))
        n_in = inner[0] if inner[1] else values[f"bn_g{len(outer)}"]
        wg, rows = bn_apply_shape(pd.apply_wg, n_in, -(-o // pd.apply_rows))
        rt.update(wg=wg, rows=rows)
    else:
        rt["wg"] = pd.apply_wg
    return BnApply(**{"dims": tuple(dims), **fields, **rt, "per_item": pd.apply_rows}), values


def _split_stats(plan, red: BnReduce, fin: BnFinalize, red_args: dict,
                 fin_args: dict) -> None:
    """Add the split statistics' launches: the channel reduction ``red`` and the finalize
    kernel ``fin``, in their run-time forms where the layouts are plain
    (:func:`bn_reduce_runtime`, :func:`bn_finalize_runtime`: minibatch, spatial sizes,
    strides, chunk and partial counts as arguments), so a new minibatch or image size reuses
    both programs."""
    found = bn_reduce_runtime(red)
    if found is not None:
        red, sizes = found
        red_args = {**red_args, **sizes}
        fin, sizes = bn_finalize_runtime(fin)
        fin_args = {**fin_args, **sizes}
    plan.kernel("bn_reduce", red, build_bn_reduce, **red_args)
    plan.kernel("bn_finalize", fin, build_bn_finalize, **fin_args)


def _stat_md(C: int) -> MemoryDesc:
    return MemoryDesc([C], data_type.f32, "a")


class batch_normalization_forward(primitive):
    """Batch normalization forward (training or inference); data f32, bf16 or f16,
    statistics, scale and shift f32."""

    class primitive_desc(_bn_pd):
        """``batch_normalization_forward.primitive_desc(engine, prop_kind, src_desc,
        dst_desc, epsilon, flags, attr=None)``."""

        _kind = "batch_normalization_forward"
        signature = Signature(
            "batch_normalization_forward.primitive_desc", head=("engine", "aprop_kind"),
            forms=(("src_desc", "dst_desc", "epsilon", "flags"),), tail=("attr",),
            aliases={"aengine": "engine", "prop_kind": "aprop_kind"},
            kinds={"epsilon": NUMBER, "flags": FLAGS})

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            kind = self._kind
            self._init_base(a["engine"], a["attr"])
            self._prop = parse_prop(kind, a["aprop_kind"], (prop_kind.forward_training,
                                                             prop_kind.forward_inference))
            self._common(a)
            src, dst = a["src_desc"], a["dst_desc"]
            check_data_desc(kind, "src_desc", src, 2, 5, allow_any=False, dtypes=_BN_DTYPES)
            check_data_desc(kind, "dst_desc", dst, 2, 5, allow_any=True, dtypes=_BN_DTYPES)
            same_dims(kind, "dst_desc", dst, "src_desc", src)
            dst = follow(dst, src, keep_type=True)
            C = src.dims[1]
            training = self._prop == prop_kind.forward_training
            self._stats_in = self.global_stats
            self._args[ARG_SRC] = ArgSpec(src, False)
            self._args[ARG_DST] = ArgSpec(dst, True)
            if self.add:  # oneDNN: src_1 has dst's desc (dst_md(3))
                self._args[ARG_SRC_1] = ArgSpec(dst, False)
            if self.global_stats or training:
                for arg in (ARG_MEAN, ARG_VARIANCE):
                    self._args[arg] = ArgSpec(_stat_md(C), not self.global_stats)
            if self.use_scale:
                self._args[ARG_SCALE] = ArgSpec(_stat_md(C), False)
            if self.use_shift:
                self._args[ARG_SHIFT] = ArgSpec(_stat_md(C), False)
            self.write_ws = self.relu and training
            if self.write_ws:
                n = math.prod(src.get_padded_dims())
                self._args[ARG_WORKSPACE] = ArgSpec(MemoryDesc([n], data_type.u8, "a"), True)
            self._reduce_params(src)
            lays = [layout_of(src), layout_of(dst)] + (
                [logical_layout(src.dims)] if self.write_ws else [])
            if self.global_stats or not self._fuse(src.dims, lays, [src]):
                self.fused = False
                self._plan_reduce(None if self.global_stats else BnReduce(
                    dims=tuple(src.dims), x=layout_of(src), lanes=self.lanes, wg=self.red_wg,
                    groups=self.groups, x_dt=src.data_type.name, tree=self.tree,
                    vec=self.red_vec, vec_k=self.red_vec_k))
            self._impl = ("ocl:bnorm:fused" if self.fused else
                          f"ocl:bnorm:{'global' if self.global_stats else self.lanes}")
            self._info = (f"flags:{int(self._flags):#x} mb{src.dims[0]}ic{C}"
                          f"sp{'x'.join(map(str, src.dims[2:])) or '1'}")

    def _create(self) -> None:
        pd = self._pd
        plan = self._plan = Plan(pd.get_engine(), pd._kind, scratch_elems=pd._scratch_elems)
        src = pd._args[ARG_SRC].md
        dims, C = tuple(src.dims), src.dims[1]
        x = layout_of(src)
        stat = layout_of(_stat_md(C))
        ss = {}
        if pd.use_scale:
            ss["scale"] = Ref(ARG_SCALE)
        if pd.use_shift:
            ss["shift"] = Ref(ARG_SHIFT)
        sc = layout_of(pd._args[ARG_SCALE].md) if pd.use_scale else None
        sh = layout_of(pd._args[ARG_SHIFT].md) if pd.use_shift else None
        dst = pd._args[ARG_DST].md
        if pd.fused:
            write = ARG_MEAN in pd._args
            rt, sizes = _runtime(dims, [x, layout_of(dst)] + (
                [logical_layout(dims)] if pd.write_ws else []), x=x, out=layout_of(dst))
            fused = BnFused(**{"dims": dims, "x": x, "out": layout_of(dst), **rt}, stat=stat,
                            eps=pd._eps, scale=sc, shift=sh, relu=pd.relu, ws=pd.write_ws,
                            add=pd.add, write_stats=write, wg=pd.fused_wg,
                            subgroup=pd.fused_sub, x_dt=src.data_type.name,
                            out_dt=dst.data_type.name)
            extra = {"ws": Ref(ARG_WORKSPACE)} if pd.write_ws else {}
            if pd.add:
                extra["src1"] = Ref(ARG_SRC_1)
            if write:
                extra.update(mean=Ref(ARG_MEAN), variance=Ref(ARG_VARIANCE))
            plan.kernel("bn_fused", fused, build_bn_fused, src=Ref(ARG_SRC), dst=Ref(ARG_DST),
                        **ss, **extra, **sizes)
            return
        if pd.global_stats:
            fin = BnFinalize(C=C, R=1, mode="fwd_given", eps=pd._eps, stat=stat, scale=sc,
                             shift=sh, wg=pd.small_wg)
            plan.kernel("bn_finalize", fin, build_bn_finalize, mean=Ref(ARG_MEAN),
                        variance=Ref(ARG_VARIANCE), coef=SCRATCH, p_off=0, k_off=pd.k_off,
                        **ss)
        else:
            write = ARG_MEAN in pd._args
            fin = BnFinalize(C=C, R=math.prod(dims) // C, mode="fwd_stats", eps=pd._eps,
                             stat=stat, scale=sc, shift=sh, groups=pd.partials,
                             write_stats=write, wg=pd.small_wg, x=x, ndims=len(dims),
                             x_dt=src.data_type.name)
            _split_stats(plan, pd.red, fin, dict(src=Ref(ARG_SRC), part=SCRATCH,
                                                 p_off=pd.p_off),
                         dict(src=Ref(ARG_SRC), mean=Ref(ARG_MEAN) if write else SCRATCH,
                              variance=Ref(ARG_VARIANCE) if write else SCRATCH, coef=SCRATCH,
                              p_off=pd.p_off, k_off=pd.k_off, **ss))
        app, sizes = _apply(pd, dims, [x, layout_of(dst)] + (
            [logical_layout(dims)] if pd.write_ws else []), x=x, out=layout_of(dst),
            relu=pd.relu, ws=pd.write_ws, add=pd.add, x_dt=src.data_type.name,
            out_dt=dst.data_type.name)
        extra = {"ws": Ref(ARG_WORKSPACE)} if pd.write_ws else {}
        if pd.add:
            extra["src1"] = Ref(ARG_SRC_1)
        plan.kernel("bn_apply", app, build_bn_apply, src=Ref(ARG_SRC), coef=SCRATCH,
                    k_off=pd.k_off, dst=Ref(ARG_DST), **extra, **sizes)

    def _execute(self, s, args) -> None:
        self._plan.execute(s, args)


class batch_normalization_backward(primitive):
    """Batch normalization backward (``backward``: diff_src, diff_scale, diff_shift;
    ``backward_data``: diff_src); data f32, bf16 or f16, statistics and parameters f32."""

    class primitive_desc(_bn_pd):
        """``batch_normalization_backward.primitive_desc(engine, prop_kind, diff_src_desc,
        diff_dst_desc, src_desc, epsilon, flags, hint_fwd_pd, attr=None)``."""

        _kind = "batch_normalization_backward"
        signature = Signature(
            "batch_normalization_backward.primitive_desc", head=("engine", "aprop_kind"),
            forms=(("diff_src_desc", "diff_dst_desc", "src_desc", "epsilon", "flags",
                    "hint_fwd_pd"),), tail=("attr",),
            aliases={"aengine": "engine", "prop_kind": "aprop_kind"},
            kinds={"epsilon": NUMBER, "flags": FLAGS})

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            kind = self._kind
            self._init_base(a["engine"], a["attr"])
            self._prop = parse_prop(kind, a["aprop_kind"], (prop_kind.backward,
                                                             prop_kind.backward_data))
            self._common(a)
            hint = a["hint_fwd_pd"]
            if not isinstance(hint, batch_normalization_forward.primitive_desc):
                raise invalid_arguments(f"{kind}: hint_fwd_pd must be a "
                                        f"batch_normalization_forward.primitive_desc, got "
                                        f"{type(hint).__qualname__}")
            src, dsrc, ddst = a["src_desc"], a["diff_src_desc"], a["diff_dst_desc"]
            for n, md in (("src_desc", src), ("diff_src_desc", dsrc), ("diff_dst_desc", ddst)):
                check_data_desc(kind, n, md, 2, 5, allow_any=True, dtypes=_BN_DTYPES)
            same_dims(kind, "diff_dst_desc", ddst, "src_desc", src)
            same_dims(kind, "diff_src_desc", dsrc, "diff_dst_desc", ddst)
            hint_src = hint.src_desc()
            if src.is_any():
                src = (hint_src if tuple(hint_src.dims) == tuple(src.dims)
                       else follow(src, src, keep_type=True))
            ddst, dsrc = follow(ddst, src, keep_type=True), follow(dsrc, src, keep_type=True)
            C = src.dims[1]
            self._stats_in = True
            self._args[ARG_SRC] = ArgSpec(src, False)
            self._args[ARG_MEAN] = ArgSpec(_stat_md(C), False)
            self._args[ARG_VARIANCE] = ArgSpec(_stat_md(C), False)
            self._args[ARG_DIFF_DST] = ArgSpec(ddst, False)
            self._args[ARG_DIFF_SRC] = ArgSpec(dsrc, True)
            if self.use_scale:
                self._args[ARG_SCALE] = ArgSpec(_stat_md(C), False)
            if self.use_shift:  # an input oneDNN lists for backward; the gradient needs none
                self._args[ARG_SHIFT] = ArgSpec(_stat_md(C), False, required=False)
            full = self._prop == prop_kind.backward
            if full and self.use_scale:
                self._args[ARG_DIFF_SCALE] = ArgSpec(_stat_md(C), True)
            if full and self.use_shift:
                self._args[ARG_DIFF_SHIFT] = ArgSpec(_stat_md(C), True)
            if self.add:  # oneDNN: diff_src_1 has diff_dst's desc (diff_dst_md(1))
                self._args[ARG_DIFF_SRC_1] = ArgSpec(ddst, True)
            if self.relu:
                ws = hint.workspace_desc()
                if ws.is_zero():
                    which = "fuse_norm_add_relu" if self.add else "fuse_norm_relu"
                    raise invalid_arguments(
                        f"{kind}: flags have {which}, but hint_fwd_pd has no workspace "
                        f"(create it with forward_training and {which})")
                if tuple(hint_src.dims) != tuple(src.dims):
                    raise invalid_arguments(f"{kind}: hint_fwd_pd src dims "
                                            f"{list(hint_src.dims)} differ from src_desc's "
                                            f"{list(src.dims)}")
                self._args[ARG_WORKSPACE] = ArgSpec(ws, False)
            self.reduce = not self.global_stats or (full and (self.use_scale or self.use_shift))
            self._reduce_params(src)
            lays = [layout_of(src), layout_of(dsrc), layout_of(ddst)] + (
                [logical_layout(src.dims)] if self.relu else [])
            if self.global_stats or not self._fuse(src.dims, lays, [src, ddst]):
                self.fused = False
                self._plan_reduce(BnReduce(
                dims=tuple(src.dims), x=layout_of(src), dy=layout_of(ddst),
                mean=layout_of(_stat_md(C)), ws=self.relu, lanes=self.lanes, wg=self.red_wg,
                    groups=self.groups, x_dt=src.data_type.name, dy_dt=ddst.data_type.name,
                    tree=self.tree, vec=self.red_vec, vec_k=self.red_vec_k)
                    if self.reduce else None)
            self._impl = ("ocl:bnorm:fused" if self.fused else
                          f"ocl:bnorm:{self.lanes if self.reduce else 'global'}")
            self._info = (f"flags:{int(self._flags):#x} mb{src.dims[0]}ic{C}"
                          f"sp{'x'.join(map(str, src.dims[2:])) or '1'}")

    def _create(self) -> None:
        pd = self._pd
        plan = self._plan = Plan(pd.get_engine(), pd._kind, scratch_elems=pd._scratch_elems)
        src = pd._args[ARG_SRC].md
        dims, C = tuple(src.dims), src.dims[1]
        x = layout_of(src)
        dy = layout_of(pd._args[ARG_DIFF_DST].md)
        stat = layout_of(_stat_md(C))
        ws = {"ws": Ref(ARG_WORKSPACE)} if pd.relu else {}
        d1 = {"diff_src1": Ref(ARG_DIFF_SRC_1)} if pd.add else {}
        if pd.fused:
            self._create_fused(plan, dims, x, dy, stat, {**ws, **d1})
            return
        outs, dsc, dsh = _bwd_outputs(pd)
        # R enters only the statistics' gradient terms (none with global statistics)
        R = 0 if pd.global_stats else math.prod(dims) // C
        fin = BnFinalize(C=C, R=R, mode="bwd", eps=pd._eps, stat=stat,
                         scale=layout_of(pd._args[ARG_SCALE].md) if pd.use_scale else None,
                         groups=pd.partials, diff_scale=dsc, diff_shift=dsh,
                         global_stats=pd.global_stats, wg=pd.small_wg)
        fin_args = dict(mean=Ref(ARG_MEAN), variance=Ref(ARG_VARIANCE), coef=SCRATCH,
                        p_off=pd.p_off, k_off=pd.k_off, **outs)
        if pd.reduce:
            _split_stats(plan, pd.red, fin, dict(src=Ref(ARG_SRC), diff_dst=Ref(ARG_DIFF_DST),
                                                 mean=Ref(ARG_MEAN), part=SCRATCH,
                                                 p_off=pd.p_off, **ws), fin_args)
        else:
            plan.kernel("bn_finalize", fin, build_bn_finalize, **fin_args)
        dsrc = pd._args[ARG_DIFF_SRC].md
        app, sizes = _apply(pd, dims, [x, layout_of(dsrc), dy] + (
            [logical_layout(dims)] if pd.relu else []), x=x, out=layout_of(dsrc), dy=dy,
            ws=pd.relu, add=pd.add, x_dt=src.data_type.name,
            dy_dt=pd._args[ARG_DIFF_DST].md.data_type.name, out_dt=dsrc.data_type.name)
        plan.kernel("bn_apply", app, build_bn_apply, src=Ref(ARG_SRC),
                    diff_dst=Ref(ARG_DIFF_DST), coef=SCRATCH, k_off=pd.k_off,
                    dst=Ref(ARG_DIFF_SRC), **ws, **d1, **sizes)

    def _create_fused(self, plan, dims, x, dy, stat, bufs) -> None:
        """The backward as one kernel per channel; ``bufs`` binds the workspace and
        diff_src_1 where the flags have them."""
        pd = self._pd
        outs, dsc, dsh = _bwd_outputs(pd)
        dsrc = pd._args[ARG_DIFF_SRC].md
        rt, sizes = _runtime(dims, [x, layout_of(dsrc), dy] + (
            [logical_layout(dims)] if pd.relu else []), x=x, out=layout_of(dsrc), dy=dy)
        fused = BnFused(**{"dims": dims, "x": x, "out": layout_of(dsrc), "dy": dy, **rt},
                        stat=stat, eps=pd._eps,
                        scale=layout_of(pd._args[ARG_SCALE].md) if pd.use_scale else None,
                        ws=pd.relu, add=pd.add, diff_scale=dsc, diff_shift=dsh,
                        wg=pd.fused_wg,
                        subgroup=pd.fused_sub, x_dt=pd._args[ARG_SRC].md.data_type.name,
                        dy_dt=pd._args[ARG_DIFF_DST].md.data_type.name,
                        out_dt=dsrc.data_type.name)
        plan.kernel("bn_fused", fused, build_bn_fused, src=Ref(ARG_SRC),
                    diff_dst=Ref(ARG_DIFF_DST), mean=Ref(ARG_MEAN), variance=Ref(ARG_VARIANCE),
                    dst=Ref(ARG_DIFF_SRC), **outs, **bufs, **sizes)

    def _execute(self, s, args) -> None:
        self._plan.execute(s, args)


def _bwd_outputs(pd) -> tuple[dict, object, object]:
    """The backward kernels' scale/diff_scale/diff_shift bindings and the diff layouts."""
    outs, dsc, dsh = {}, None, None
    if ARG_DIFF_SCALE in pd._args:
        dsc = layout_of(pd._args[ARG_DIFF_SCALE].md)
        outs["diff_scale"] = Ref(ARG_DIFF_SCALE)
    if ARG_DIFF_SHIFT in pd._args:
        dsh = layout_of(pd._args[ARG_DIFF_SHIFT].md)
        outs["diff_shift"] = Ref(ARG_DIFF_SHIFT)
    if pd.use_scale:
        outs["scale"] = Ref(ARG_SCALE)
    return outs, dsc, dsh
