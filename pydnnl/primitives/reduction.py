"""The reduction primitive (``dnnl::reduction``): max, min, sum, product, mean and the
Lp norms (with ``p`` and ``eps``) over any set of dims of a tensor of any rank (f32,
f16 or bf16 src and dst, float accumulation).

``dst`` has ``src``'s rank; each of its dims equals src's (kept) or is 1 (reduced; at least
one dim must be reduced, as in oneDNN). The plan is one generated kernel
(:mod:`pydnnl.kernels.reduction`) reading ``src`` and writing ``dst`` through their own
strides and inner blocks. Where the reduced values are innermost and contiguous in memory: on
CPUs a work-item per output with vector loads, on GPUs a few work-items per output and several
outputs per work-group (``runtime/heuristics/reduction.py``); else a work-item per output (or
a work-group where blocked); when there are too few outputs to fill the device, each
reduction is cut into chunks whose partial results a second kernel combines (scratchpad).
:func:`plan_stages` also serves global pooling.
"""
from __future__ import annotations

from dataclasses import replace

from ..constants import ARG_DST, ARG_SRC, algorithm
from ..error import invalid_arguments
from ..kernels import reduction as K
from ..kernels.reorder import layout_of
from ..memory.desc import MemoryDesc
from ..runtime.heuristics import reduction as HR
from ..runtime.heuristics import softmax as H
from ..runtime.plan import SCRATCH, Plan, Ref
from .base import ArgSpec, primitive, primitive_desc_base
from .signature import NUMBER, Signature, bind
from .softmax import check_attr, check_desc, follow

__all__ = ["reduction"]

_NORMS = ("norm_lp_max", "norm_lp_sum", "norm_lp_power_p_max", "norm_lp_power_p_sum")


class reduction(primitive):
    """``dst = reduce_op over the reduced dims of src`` (oneDNN's reduction; f32, f16, bf16)."""

    class primitive_desc(primitive_desc_base):
        """``reduction.primitive_desc(engine, algorithm, src_desc, dst_desc, p, eps,
        attr=None)``."""

        _kind = "reduction"
        signature = Signature(
            "reduction.primitive_desc",
            head=("engine", "algorithm", "src_desc", "dst_desc", "p", "eps"), forms=((),),
            tail=("attr",), aliases={"aengine": "engine", "aalgorithm": "algorithm"},
            kinds={"p": NUMBER, "eps": NUMBER})

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            self._init_base(a["engine"], a["attr"])
            kind = self._kind
            try:
                alg = algorithm(int(a["algorithm"]))
            except (TypeError, ValueError):
                alg = None
            name = alg.name.removeprefix("reduction_") if alg is not None else ""
            if name not in K.ALGORITHMS:
                raise invalid_arguments(f"{kind}: algorithm must be one of "
                                        f"dnnl.algorithm.reduction_*, got {a['algorithm']!r}")
            self._alg, self._name = alg, name
            for n in ("p", "eps"):
                v = a[n]
                if isinstance(v, bool) or not NUMBER.accepts(v):
                    raise invalid_arguments(f"{kind}: {n} must be a number, got {v!r}")
            self._p, self._eps = float(a["p"]), float(a["eps"])
            if name in _NORMS and not self._p >= 1.0:
                raise invalid_arguments(f"{kind}: {alg.name} needs p >= 1, got p={self._p}")
            src = check_desc(kind, "src_desc", a["src_desc"], allow_any=False)
            dst = a["dst_desc"]
            if not isinstance(dst, MemoryDesc) or dst.is_zero():
                raise invalid_arguments(f"{kind}: dst_desc must be a memory.desc, got {dst!r}")
            if len(dst.dims) != len(src.dims) or any(
                    d not in (1, s) for d, s in zip(dst.dims, src.dims)):
                raise invalid_arguments(
                    f"{kind}: dst_desc dims {list(dst.dims)} must have src_desc's rank "
                    f"{len(src.dims)}, each dim equal to src's {list(src.dims)} or 1")
            if tuple(dst.dims) == tuple(src.dims):
                raise invalid_arguments(
                    f"{kind}: dst_desc dims {list(dst.dims)} equal src_desc dims: no dim is "
                    f"reduced (oneDNN rejects the identity)")
            if dst.is_any():
                dst = follow(src, dst.dims, dst.data_type)
            check_desc(kind, "dst_desc", dst)
            check_attr(kind, self._attr)
            self._args[ARG_SRC] = ArgSpec(src, False)
            self._args[ARG_DST] = ArgSpec(dst, True)
            self._plan_problem(src, dst)

        def _plan_problem(self, src: MemoryDesc, dst: MemoryDesc) -> None:
            self._stages, scratch, self._impl = plan_stages(
                self.get_engine().info, self._name, self._p, self._eps, src, dst)
            self._scratch_elems = scratch
            self._info = (f"alg:{alg_name(self._alg)} p:{self._p:g} eps:{self._eps:g} "
                          f"{'x'.join(map(str, src.dims))}:{'x'.join(map(str, dst.dims))}")
            self._finish_scratchpad(scratch * 4)

        def get_algorithm(self) -> algorithm:
            return self._alg

        def get_p(self) -> float:
            return self._p

        def get_epsilon(self) -> float:
            return self._eps

    def _create(self) -> None:
        pd = self._pd
        self._plan = stages_plan(pd.get_engine(), pd._kind, pd._stages, pd._scratch_elems)

    def _execute(self, s, args) -> None:
        self._plan.execute(s, args)


def plan_stages(info, name: str, p: float, eps: float, src: MemoryDesc,
                dst: MemoryDesc) -> tuple[list, int, str]:
    """The kernels (:class:`~pydnnl.kernels.reduction.ReductionProblem` stages) of a reduction
    ``name`` (``"sum"``, ``"mean"``, ...) from ``src`` to ``dst`` on the device ``info``: the
    stages, the scratchpad floats they need and the implementation name. Shared with the
    pooling primitive, whose global pooling is a reduction."""
    nd = len(src.dims)
    reduced = tuple(dst.dims[d] != src.dims[d] for d in range(nd))
    ignore = (frozenset(), frozenset(d for d in range(nd) if reduced[d]))
    dims, lays, roles = K.fold_dims(src.dims, (layout_of(src), layout_of(dst)), reduced, ignore)
    base = K.ReductionProblem(alg=name, p=p, eps=eps, dims=dims, reduced=roles, src=lays[0],
                              dst=lays[1], sdt=src.data_type.name, ddt=dst.data_type.name)
    O, R = base.outputs, base.count
    red = [d for d in range(len(dims)) if roles[d]]
    # row kernels: the innermost dim in src's memory is a reduced one with stride 1
    inner = red and red[-1] == len(dims) - 1 and K.min_stride(lays[0], red[-1]) == 1
    vec, rows = 1, 1
    if HR.use_vrow(info) and K.vrow_ok(dims, roles, lays[0]):
        variant = "vrow"
        vec = HR.vrow_vec(info)
        wg, splits = HR.vrow_launch(info, O, R, R // dims[-1])
    elif info.is_gpu and inner and HR.row_lanes(info, R) > 1:
        variant = "row"
        wg = HR.row_lanes(info, R)
        rows = HR.rows_per_group(info, wg)
        splits = H.reduction_splits(info, O, R, wg) if rows == 1 else 1
    else:
        row = H.use_reduction_row_kernel(info, R, O, bool(inner))
        if not row and (name not in _NORMS or p in (1.0, 2.0)):
            vec = next((v for v in H.reduction_vecs(info) if K.vec_ok(dims, roles, lays, v)), 1)
        wg = H.row_wg(info, R) if row else H.strided_wg(info, vec)
        splits = H.reduction_splits(info, O // vec, R, wg if row else 1)
        variant = "row" if row else "strided"
    stages = []
    scratch = 0
    if splits == 1:
        stages.append(replace(base, variant=variant, wg=wg, vec=vec, rows=rows))
    else:
        stages.append(replace(base, variant=variant, wg=wg, splits=splits, stage="partial",
                              part_off=0, vec=vec, rows=rows))
        stages.append(replace(base, variant="strided", wg=H.strided_wg(info), splits=splits,
                              stage="final", part_off=0))
        scratch = O * splits
    impl = f"ocl:reduction:{variant}" + (f":split{splits}" if splits > 1 else "")
    return stages, scratch, impl


def stages_plan(engine, name: str, stages: list, scratch: int) -> Plan:
    """A plan running ``stages`` (from :func:`plan_stages`) from ``ARG_SRC`` to ``ARG_DST``,
    partial results in the scratchpad. A one-kernel reduction takes its outer kept count (the
    minibatch) at run time (:func:`~pydnnl.kernels.reduction.runtime_form`): one program for
    every minibatch of its class."""
    plan = Plan(engine, name, scratch_elems=scratch)
    refs = {"src": Ref(ARG_SRC), "dst": Ref(ARG_DST), "part": SCRATCH}
    for st in stages:
        st, sizes = K.runtime_form(st)
        plan.kernel("reduction", st, K.build_reduction,
                    **{n: refs[n] for n in K.kernel_args(st)}, **sizes)
    return plan


def alg_name(alg: algorithm) -> str:
    return alg.name.removeprefix("reduction_")
