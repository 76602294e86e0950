"""The layer normalization primitives (``dnnl::layer_normalization_forward`` and
``dnnl::layer_normalization_backward``, oneDNN v3): normalization over the last dim,

``dst[t, c] = gamma[c] * (src[t, c] - mean[t]) / sqrt(variance[t] + eps) + beta[c]``

for every leading index ``t``. Statistics (``stat_desc``: src's dims without the last one,
any plain layout; derived from src when left out) are computed, and written in forward
training, or given (``use_global_stats``); ``use_scale`` / ``use_shift`` take ``[C]``
gamma / beta. oneDNN's layer normalization takes no other flag. Backward: ``backward``
gives diff_src and, with the flags, diff_scale / diff_shift; ``backward_data`` diff_src only.

src/dst and the gradients may be f32, f16 or bf16 (float computation; statistics, scale and
shift f32, as in oneDNN). Plan: one kernel with a work-group per row (one read for the
shifted sums of the statistics, sub-group or local-memory reductions, then the normalizing
pass; backward the two sums of the gradient, then diff_src); diff_scale / diff_shift as
column partial sums over chunks of rows plus a sum of the chunks.
"""
from __future__ import annotations

import math

from ..constants import (
    ARG_DIFF_DST,
    ARG_DIFF_SCALE,
    ARG_DIFF_SHIFT,
    ARG_DIFF_SRC,
    ARG_DST,
    ARG_MEAN,
    ARG_SCALE,
    ARG_SHIFT,
    ARG_SRC,
    ARG_VARIANCE,
    prop_kind,
)
from ..error import invalid_arguments, unimplemented
from ..kernels.normalization import (
    LnRows,
    LnScaleShiftFinalize,
    LnScaleShiftReduce,
    build_ln_bwd,
    build_ln_fwd,
    build_ln_ss_finalize,
    build_ln_ss_reduce,
    ln_runtime_form,
    ln_vec_ok,
)
from ..kernels.reorder import layout_of
from ..kernels.sizevars import size_var
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from ..runtime.heuristics import normalization as rules
from ..runtime.plan import SCRATCH, Plan, Ref
from .base import ArgSpec, primitive
from .batch_normalization import (
    FLAGS,
    _bn_pd,
    check_data_desc,
    follow,
    parse_prop,
    same_dims,
)
from .signature import NUMBER, Signature, bind

__all__ = ["layer_normalization_forward", "layer_normalization_backward"]

_PLAIN = "abcdefghijkl"
# src/dst and the gradients: f32, f16 or bf16 storage, float computation; statistics, scale
# and shift stay f32 (as in oneDNN)
_DTYPES = (data_type.f32, data_type.f16, data_type.bf16)


def _vec(C: int) -> MemoryDesc:
    return MemoryDesc([C], data_type.f32, "a")


class _ln_pd(_bn_pd):
    _ALLOWED, _UNIMPL = 0x07, 0x00  # use_global_stats, use_scale, use_shift

    def _stat(self, stat, src: MemoryDesc, hint=None) -> MemoryDesc:
        """The statistics desc: given, or src's dims without the last (the hint's layout
        where it has one, else row-major)."""
        kind = self._kind
        want = tuple(src.dims[:-1])
        if stat is None or (isinstance(stat, MemoryDesc) and stat.is_zero()):
            if hint is not None and tuple(hint.mean_desc().dims) == want:
                return hint.mean_desc()
            return MemoryDesc(list(want), data_type.f32, _PLAIN[:len(want)])
        if not isinstance(stat, MemoryDesc):
            raise invalid_arguments(f"{kind}: stat_desc must be a memory.desc or None, got "
                                    f"{stat!r}")
        if tuple(stat.dims) != want:
            raise invalid_arguments(f"{kind}: stat_desc dims {list(stat.dims)}, expected src "
                                    f"dims without the last one {list(want)}")
        if stat.data_type != data_type.f32:
            raise unimplemented(f"{kind}: stat_desc data type {stat.data_type.name}; only f32 "
                                f"is implemented")
        if stat.is_any():
            return MemoryDesc(list(want), data_type.f32, _PLAIN[:len(want)])
        return stat

    def _ss_args(self, C: int, backward: bool, full: bool) -> None:
        if self.use_scale:
            self._args[ARG_SCALE] = ArgSpec(_vec(C), False)
        if self.use_shift:  # backward lists shift as an input; its gradient needs none
            self._args[ARG_SHIFT] = ArgSpec(_vec(C), False, required=not backward)
        if full and self.use_scale:
            self._args[ARG_DIFF_SCALE] = ArgSpec(_vec(C), True)
        if full and self.use_shift:
            self._args[ARG_DIFF_SHIFT] = ArgSpec(_vec(C), True)


_FWD_FORMS = (("src_desc", "dst_desc", "stat_desc", "epsilon", "flags"),
              ("src_desc", "dst_desc", "epsilon", "flags"))
_BWD_FORMS = (("diff_src_desc", "diff_dst_desc", "src_desc", "stat_desc", "epsilon", "flags",
               "hint_fwd_pd"),
              ("diff_src_desc", "diff_dst_desc", "src_desc", "epsilon", "flags", "hint_fwd_pd"))


class layer_normalization_forward(primitive):
    """Layer normalization forward (training or inference); f32, f16 or bf16 data."""

    class primitive_desc(_ln_pd):
        """``layer_normalization_forward.primitive_desc(engine, prop_kind, src_desc,
        dst_desc, [stat_desc,] epsilon, flags, attr=None)``."""

        _kind = "layer_normalization_forward"
        signature = Signature(
            "layer_normalization_forward.primitive_desc", head=("engine", "aprop_kind"),
            forms=_FWD_FORMS, tail=("attr",), optional=frozenset({"stat_desc"}),
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
            check_data_desc(kind, "src_desc", src, 2, 5, allow_any=False, dtypes=_DTYPES)
            check_data_desc(kind, "dst_desc", dst, 2, 5, allow_any=True, dtypes=_DTYPES)
            same_dims(kind, "dst_desc", dst, "src_desc", src)
            dst = follow(dst, src, keep_type=True)
            stat = self._stat(a.get("stat_desc"), src)
            C = src.dims[-1]
            training = self._prop == prop_kind.forward_training
            self._stats_in = self.global_stats
            self._args[ARG_SRC] = ArgSpec(src, False)
            self._args[ARG_DST] = ArgSpec(dst, True)
            if self.global_stats or training:
                self._args[ARG_MEAN] = ArgSpec(stat, not self.global_stats)
                self._args[ARG_VARIANCE] = ArgSpec(stat, not self.global_stats)
            self._stat_md = stat
            self._ss_args(C, backward=False, full=False)
            self.wg = rules.ln_row_wg(self._engine.info, C)
            self.subgroup = rules.ln_row_subgroup(self._engine.info, self.wg)
            self.cache = rules.ln_row_cache(self._engine.info, C, self.wg)
            self.accs = rules.ln_row_accs(self._engine.info, C, self.wg, self.cache)
            self.vec = rules.ln_fwd_vec(self._engine.info, C)
            if self.vec and not ln_vec_ok(layout_of(src), layout_of(dst)):
                self.vec = 0
            self.vec_rows = 1
            if self.vec:
                self.accs = rules.ln_fwd_vec_accs(self._engine.info, C, self.vec)
                self.vec_rows = rules.ln_fwd_vec_rows(self._engine.info, C)
            self._scratch_elems = 0
            self._impl = "ocl:lnorm:rows"
            self._info = (f"flags:{int(self._flags):#x} "
                          f"{'x'.join(map(str, src.dims))}")

    def _create(self) -> None:
        pd = self._pd
        plan = self._plan = Plan(pd.get_engine(), pd._kind)
        src = pd._args[ARG_SRC].md
        stat = layout_of(pd._stat_md)
        write = ARG_MEAN in pd._args and not pd.global_stats
        p = LnRows(dims=tuple(src.dims), x=layout_of(src), out=layout_of(pd._args[ARG_DST].md),
                   stat=stat, var=stat, eps=pd._eps,
                   scale=layout_of(_vec(src.dims[-1])) if pd.use_scale else None,
                   shift=layout_of(_vec(src.dims[-1])) if pd.use_shift else None,
                   global_stats=pd.global_stats, write_stats=write, wg=pd.wg, cache=pd.cache,
                   accs=pd.accs, subgroup=pd.subgroup, xdt=src.data_type.name, vec=pd.vec,
                   vec_rows=pd.vec_rows,
                   odt=pd._args[ARG_DST].md.data_type.name)
        named = {"src": Ref(ARG_SRC), "dst": Ref(ARG_DST)}
        if ARG_MEAN in pd._args:
            named.update(mean=Ref(ARG_MEAN), variance=Ref(ARG_VARIANCE))
        if pd.use_scale:
            named["scale"] = Ref(ARG_SCALE)
        if pd.use_shift:
            named["shift"] = Ref(ARG_SHIFT)
        # the row count (batch x sequence) a kernel argument: one program for every row count
        p, sizes = ln_runtime_form(p)
        plan.kernel("ln_fwd", p, build_ln_fwd, **named, **sizes)

    def _execute(self, s, args) -> None:
        self._plan.execute(s, args)


class layer_normalization_backward(primitive):
    """Layer normalization backward (``backward``: diff_src, diff_scale, diff_shift;
    ``backward_data``: diff_src); f32, f16 or bf16 data."""

    class primitive_desc(_ln_pd):
        """``layer_normalization_backward.primitive_desc(engine, prop_kind, diff_src_desc,
        diff_dst_desc, src_desc, [stat_desc,] epsilon, flags, hint_fwd_pd, attr=None)``."""

        _kind = "layer_normalization_backward"
        signature = Signature(
            "layer_normalization_backward.primitive_desc", head=("engine", "aprop_kind"),
            forms=_BWD_FORMS, tail=("attr",), optional=frozenset({"stat_desc"}),
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
            if not isinstance(hint, layer_normalization_forward.primitive_desc):
                raise invalid_arguments(f"{kind}: hint_fwd_pd must be a "
                                        f"layer_normalization_forward.primitive_desc, got "
                                        f"{type(hint).__qualname__}")
            src, dsrc, ddst = a["src_desc"], a["diff_src_desc"], a["diff_dst_desc"]
            check_data_desc(kind, "src_desc", src, 2, 5, allow_any=True, dtypes=_DTYPES)
            check_data_desc(kind, "diff_src_desc", dsrc, 2, 5, allow_any=True, dtypes=_DTYPES)
            check_data_desc(kind, "diff_dst_desc", ddst, 2, 5, allow_any=True, dtypes=_DTYPES)
            same_dims(kind, "diff_dst_desc", ddst, "src_desc", src)
            same_dims(kind, "diff_src_desc", dsrc, "diff_dst_desc", ddst)
            if src.is_any():
                h = hint.src_desc()
                src = h if tuple(h.dims) == tuple(src.dims) else MemoryDesc(
                    src.dims, src.data_type, _PLAIN[:len(src.dims)])
                if src.data_type != a["src_desc"].data_type:
                    src = src.with_data_type(a["src_desc"].data_type)
            ddst, dsrc = follow(ddst, src, keep_type=True), follow(dsrc, src, keep_type=True)
            stat = self._stat(a.get("stat_desc"), src, hint)
            C = src.dims[-1]
            rows = math.prod(src.dims[:-1])
            full = self._prop == prop_kind.backward
            self._stats_in = True
            self._args[ARG_SRC] = ArgSpec(src, False)
            self._args[ARG_MEAN] = ArgSpec(stat, False)
            self._args[ARG_VARIANCE] = ArgSpec(stat, False)
            self._args[ARG_DIFF_DST] = ArgSpec(ddst, False)
            self._args[ARG_DIFF_SRC] = ArgSpec(dsrc, True)
            self._stat_md = stat
            self._ss_args(C, backward=True, full=full)
            info = self._engine.info
            self.wg = rules.ln_row_wg(info, C)
            self.subgroup = rules.ln_row_subgroup(info, self.wg)
            self.cache = rules.ln_row_cache(info, C, self.wg)
            self.ss = full and (self.use_scale or self.use_shift)
            self.ss_wg, self.groups, self.col_loop = rules.ln_ss_params(info, C, rows)
            self.fused_ss = (self.ss and not self.global_stats
                             and rules.ln_bwd_fused_ss(info, self.cache, self.wg))
            # chunks of the rule's row count (ln_ss_rows; where fused_ss applies the
            # rule cuts the rows into chunks of it) rather than ceil(rows / groups), the same
            # wherever rows is a multiple of it: the row kernel's chunk then does not depend on
            # the row count, which it takes at run time (ln_runtime_form)
            self.ss_rows = min(rows, rules.ln_ss_rows(info)) if self.fused_ss else 0
            if self.fused_ss:
                self.groups = -(-rows // self.ss_rows)
            self.small_wg = rules.small_wg(info, C)
            ddst = self._args[ARG_DIFF_DST].md
            self.vec = rules.ln_bwd_vec(info, C, self.fused_ss)
            if self.vec and (self.cache or not ln_vec_ok(layout_of(src), layout_of(dsrc))
                             or not ln_vec_ok(layout_of(ddst), layout_of(ddst))):
                self.vec = 0
            self.accs = rules.ln_fwd_vec_accs(info, C, self.vec) if self.vec else 1
            self.vec_rows = rules.ln_fwd_vec_rows(info, C) if self.vec else 1
            self._scratch_elems = self.groups * C * 2 if self.ss else 0
            self._finish_scratchpad(self._scratch_elems * 4)
            self._impl = "ocl:lnorm:rows"
            self._info = (f"flags:{int(self._flags):#x} "
                          f"{'x'.join(map(str, src.dims))}")

    def _create(self) -> None:
        pd = self._pd
        plan = self._plan = Plan(pd.get_engine(), pd._kind, scratch_elems=pd._scratch_elems)
        src = pd._args[ARG_SRC].md
        dims, C = tuple(src.dims), src.dims[-1]
        x, dy = layout_of(src), layout_of(pd._args[ARG_DIFF_DST].md)
        stat = layout_of(pd._stat_md)
        if pd.ss and not pd.fused_ss:
            red = LnScaleShiftReduce(dims=dims, x=x, dy=dy, stat=stat, var=stat, eps=pd._eps,
                                     groups=pd.groups, wg=pd.ss_wg, col_loop=pd.col_loop,
                                     xdt=src.data_type.name,
                                     dydt=pd._args[ARG_DIFF_DST].md.data_type.name)
            # rows and chunk count at run time where the row kernel's are (dense rows)
            red, rsizes = ln_runtime_form(red)
            plan.kernel("ln_ss_reduce", red, build_ln_ss_reduce, src=Ref(ARG_SRC),
                        diff_dst=Ref(ARG_DIFF_DST), mean=Ref(ARG_MEAN),
                        variance=Ref(ARG_VARIANCE), part=SCRATCH, p_off=0, **rsizes)
            self._finalize(plan, C, planar=False, runtime=bool(rsizes))
        runtime = self._rows(plan, dims, C, x, dy, stat, src)
        if pd.fused_ss:
            self._finalize(plan, C, planar=True, runtime=runtime)

    def _finalize(self, plan, C: int, planar: bool, runtime: bool = False) -> None:
        """diff_scale/diff_shift summed from the partial rows (``planar``: the row kernel's
        per-lane layout, else the reduce kernel's; ``runtime``: the chunk count a kernel
        argument, as the row kernel's row count)."""
        pd = self._pd
        sizes = {"ngroups": pd.groups} if runtime else {}
        fin = LnScaleShiftFinalize(
            C=C, groups=size_var("ngroups") if runtime else pd.groups, planar=planar,
            diff_scale=layout_of(_vec(C)) if ARG_DIFF_SCALE in pd._args else None,
            diff_shift=layout_of(_vec(C)) if ARG_DIFF_SHIFT in pd._args else None,
            wg=pd.small_wg)
        outs = {}
        if ARG_DIFF_SCALE in pd._args:
            outs["diff_scale"] = Ref(ARG_DIFF_SCALE)
        if ARG_DIFF_SHIFT in pd._args:
            outs["diff_shift"] = Ref(ARG_DIFF_SHIFT)
        plan.kernel("ln_ss_finalize", fin, build_ln_ss_finalize, part=SCRATCH, p_off=0, **outs,
                    **sizes)

    def _rows(self, plan, dims, C, x, dy, stat, src) -> bool:
        """Add the row kernel; whether it takes the row count at run time."""
        pd = self._pd
        p = LnRows(dims=dims, x=x, out=layout_of(pd._args[ARG_DIFF_SRC].md), stat=stat,
                   var=stat, eps=pd._eps, dy=dy,
                   scale=layout_of(_vec(C)) if pd.use_scale else None,
                   global_stats=pd.global_stats, wg=pd.wg, subgroup=pd.subgroup, cache=pd.cache,
                   xdt=src.data_type.name, dydt=pd._args[ARG_DIFF_DST].md.data_type.name,
                   odt=pd._args[ARG_DIFF_SRC].md.data_type.name, ss_rows=pd.ss_rows,
                   vec=pd.vec, accs=pd.accs, vec_rows=pd.vec_rows)
        named = {"src": Ref(ARG_SRC), "diff_dst": Ref(ARG_DIFF_DST), "mean": Ref(ARG_MEAN),
                 "variance": Ref(ARG_VARIANCE), "dst": Ref(ARG_DIFF_SRC)}
        if pd.use_scale:
            named["scale"] = Ref(ARG_SCALE)
        if pd.fused_ss:
            named.update(part=SCRATCH, p_off=0)
        p, sizes = ln_runtime_form(p)
        plan.kernel("ln_bwd", p, build_ln_bwd, **named, **sizes)
        return bool(sizes)

    def _execute(self, s, args) -> None:
        self._plan.execute(s, args)
