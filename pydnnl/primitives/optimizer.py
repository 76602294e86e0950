"""Optimizer-update primitives, a pydnnl extension (oneDNN has no optimizer): ``sgd_update``
(with optional momentum, Nesterov's form and weight decay) and ``adam_update``, each one fused
elementwise kernel per parameter tensor (:mod:`pydnnl.kernels.optimizer`), so a training step
updates its weights without leaving the device.

Execution arguments:

- ``ARG_SRC``: the parameter, read and updated in place;
- ``ARG_DIFF_SRC``: its gradient (layout ``diff_src_desc``, the parameter's by default);
- ``ARG_OPTIMIZER_STATE_0``: sgd with momentum: the momentum buffer; adam: the first moment
  ``m``. ``ARG_OPTIMIZER_STATE_1``: adam's second moment ``v``. States are laid out as
  ``pd.state_desc(i)`` says; zero them before the first step;
- ``ARG_OPTIMIZER_STEP`` (adam): a one-element f32 memory holding the step number ``t`` of
  this update (1 at the first), read on the device for the bias corrections, so a step needs
  no host transfer (advance it in place with ``eltwise_linear``, alpha 1, beta 1).

The hyper-parameters are fixed per primitive descriptor but are kernel arguments, not part of
the compiled program: recreating the primitives with a new learning rate compiles nothing.
"""
from __future__ import annotations

import math

from ..constants import (
    ARG_DIFF_SRC,
    ARG_OPTIMIZER_STATE_0,
    ARG_OPTIMIZER_STATE_1,
    ARG_OPTIMIZER_STEP,
    ARG_SRC,
    arg_name,
)
from ..error import invalid_arguments, unimplemented
from ..kernels import optimizer as K
from ..kernels.binary import dense_layout
from ..kernels.reorder import layout_of
from ..memory.data_types import data_type
from ..memory.desc import MemoryDesc
from ..runtime.heuristics import eltwise as H
from ..runtime.plan import Plan, Ref
from .base import ArgSpec, primitive, primitive_desc_base
from .signature import BOOL, NUMBER, Signature, bind
from .softmax import follow

__all__ = ["sgd_update", "adam_update"]

_STATES = (ARG_OPTIMIZER_STATE_0, ARG_OPTIMIZER_STATE_1)
_ADAM_HYPER = ("learning_rate", "beta1", "beta2", "eps", "weight_decay")


def _number(kind: str, name: str, v, low: float, high: float = math.inf,
            high_open: bool = False) -> float:
    """``v`` as a float in [low, high] (or [low, high)), else invalid_arguments."""
    if isinstance(v, bool) or not NUMBER.accepts(v):
        raise invalid_arguments(f"{kind}: {name} must be a number, got {v!r}")
    x = float(v)
    inside = low <= x < high if high_open else low <= x <= high
    if not (math.isfinite(x) and inside):
        bound = f"[{low:g}, {high:g}{')' if high_open else ']'}"
        raise invalid_arguments(f"{kind}: {name} must be a finite number in {bound}, got {v!r}")
    return x


def _param_desc(kind: str, md) -> MemoryDesc:
    if not isinstance(md, MemoryDesc) or md.is_zero():
        raise invalid_arguments(f"{kind}: src_desc must be a memory.desc, got {md!r}")
    if md.is_any():
        raise invalid_arguments(f"{kind}: src_desc must have a concrete layout (the "
                                f"parameter's own, not format_tag.any), got {md!r}")
    if md.data_type != data_type.f32:
        raise unimplemented(f"{kind}: src_desc data type {md.data_type.name}; f32 is "
                            f"implemented")
    return md


def _diff_desc(kind: str, md, param: MemoryDesc) -> MemoryDesc:
    """The gradient's desc: the parameter's when None, its layout when ``any``."""
    if md is None:
        return param
    if not isinstance(md, MemoryDesc) or md.is_zero():
        raise invalid_arguments(f"{kind}: diff_src_desc must be a memory.desc or None, got "
                                f"{md!r}")
    if tuple(md.dims) != tuple(param.dims):
        raise invalid_arguments(f"{kind}: diff_src_desc dims {list(md.dims)} must equal "
                                f"src_desc dims {list(param.dims)}")
    if md.is_any():
        return follow(param)
    if md.data_type != data_type.f32:
        raise unimplemented(f"{kind}: diff_src_desc data type {md.data_type.name}; f32 is "
                            f"implemented")
    return md


def _storage_key(md: MemoryDesc) -> tuple:
    # strides of size-1 dims never move an offset: they do not distinguish storage orders
    strides = tuple(s if d > 1 else 0 for s, d in zip(md.strides, md.padded_dims))
    return (tuple(md.dims), strides, tuple(md.inner_blks), tuple(md.inner_idxs))


def _flat(mds) -> bool:
    """Whether element ``i`` of every storage is one and the same logical element (dense, no
    block padding, one storage order): then the kernel walks storage, not logical indices."""
    return all(md.is_dense() and tuple(md.padded_dims) == tuple(md.dims)
               and _storage_key(md) == _storage_key(mds[0]) for md in mds)


class _optimizer_pd(primitive_desc_base):
    """What both update rules share: descs, queries, the kernel problem."""

    _rule = ""
    _n_states = 0

    def _setup(self, a: dict, kind: str) -> None:
        self._init_base(a["engine"], a["attr"])
        if len(self._attr.get_post_ops()) or self._attr.scales or self._attr.zero_points:
            raise unimplemented(f"{kind}: attr with post-ops, scales or zero points is not "
                                f"implemented (got {self._attr.key()!r})")
        param = _param_desc(kind, a["src_desc"])
        diff = _diff_desc(kind, a.get("diff_src_desc"), param)
        self._args[ARG_SRC] = ArgSpec(param, True)
        self._args[ARG_DIFF_SRC] = ArgSpec(diff, False)
        state = follow(param)  # dense, in the parameter's storage order
        for i in range(self._n_states):
            self._args[_STATES[i]] = ArgSpec(state, True)

    def _finish(self, hyper: dict) -> None:
        self._hyper = hyper
        self._order = (ARG_SRC, ARG_DIFF_SRC) + _STATES[:self._n_states]
        self._is_flat = _flat([self._args[a].md for a in self._order])
        self._impl = f"ocl:{self._rule}_update:" + ("flat" if self._is_flat else "strided")
        dims = self._args[ARG_SRC].md.dims
        self._info = " ".join(f"{k}:{v:g}" for k, v in hyper.items()) + \
            " " + "x".join(map(str, dims))
        self._finish_scratchpad(0)

    # -- queries ---------------------------------------------------------------------------------
    def state_desc(self, index: int = 0) -> MemoryDesc:
        """The desc of optimizer state ``index`` (a zero desc when there is none)."""
        spec = self._args.get(_STATES[index]) if 0 <= index < len(_STATES) else None
        return spec.md if spec else MemoryDesc()

    def get_learning_rate(self) -> float:
        return self._hyper["learning_rate"]

    def get_weight_decay(self) -> float:
        return self._hyper["weight_decay"]

    # -- the kernel ------------------------------------------------------------------------------
    def _problem(self, eng, **flags) -> K.OptimizerUpdate:
        mds = [self._args[a].md for a in self._order]
        sizes = tuple(md.nelems_physical() for md in mds)
        if self._rule == K.ADAM:
            sizes += (1,)
        if self._is_flat:
            count = math.prod(mds[0].dims)
            return K.OptimizerUpdate(self._rule, (count,),
                                     tuple(dense_layout(md.offset0) for md in mds), sizes,
                                     wg=H.flat_params(eng.info, count)[0], **flags)
        return K.OptimizerUpdate(self._rule, tuple(mds[0].dims),
                                 tuple(layout_of(md) for md in mds), sizes,
                                 wg=H.strided_wg(eng.info), **flags)


class _optimizer_primitive(primitive):
    def _create(self) -> None:
        pd = self._pd
        eng = pd.get_engine()
        problem = pd._problem(eng, **pd._flags())
        self._plan = Plan(eng, f"{pd._rule}_update")
        if math.prod(pd._args[ARG_SRC].md.dims) == 0:
            return  # an empty parameter: nothing to update
        bufs = [Ref(a) for a in pd._order] + ([Ref(ARG_OPTIMIZER_STEP)]
                                              if pd._rule == K.ADAM else [])
        named = dict(zip(K.buffer_names(problem), bufs))
        named.update(pd._scalars(problem))
        self._plan.kernel(f"{pd._rule}_update", problem, K.build, **named)

    def _execute(self, s, args) -> None:
        # the kernel reads and writes each element of every buffer once: storage shared by two
        # arguments would be read after its other role wrote it (disjoint views of one buffer,
        # such as parameters packed in one arena, are fine)
        spans: dict = {}
        for a in sorted(args):
            md = args[a].get_desc()
            lo = md.offset0 * md.data_type.itemsize
            hi = md.get_size()
            for other, (olo, ohi) in spans.get(args[a].buffer, {}).items():
                if lo < ohi and olo < hi:
                    raise invalid_arguments(
                        f"{self._pd._kind}.execute: {arg_name(other)} and {arg_name(a)} share "
                        f"storage (bytes {max(lo, olo)} to {min(hi, ohi)} of one buffer); the "
                        f"parameter, its gradient, each state and the step need their own")
            spans.setdefault(args[a].buffer, {})[a] = (lo, hi)
        self._plan.execute(s, args)


class sgd_update(_optimizer_primitive):
    """``param -= learning_rate * g`` with ``g = grad + weight_decay * param``; with momentum
    ``mu``: ``vel = mu * vel + g`` then ``param -= learning_rate * vel`` (Nesterov: ``g + mu *
    vel``), as ``torch.optim.SGD`` with zero dampening. f32 tensors, any layouts."""

    class primitive_desc(_optimizer_pd):
        """``sgd_update.primitive_desc(engine, src_desc, learning_rate, [momentum,
        [weight_decay, [nesterov]]], attr=None, diff_src_desc=None)``."""

        _kind = "sgd_update"
        _rule = K.SGD
        signature = Signature(
            "sgd_update.primitive_desc", head=("engine", "src_desc", "learning_rate"),
            forms=((),), tail=("momentum", "weight_decay", "nesterov", "attr"),
            keyword_only=("diff_src_desc",),
            kinds={"momentum": NUMBER, "weight_decay": NUMBER, "nesterov": BOOL},
            defaults={"momentum": 0.0, "weight_decay": 0.0, "nesterov": False})

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            kind = self._kind
            lr = _number(kind, "learning_rate", a["learning_rate"], 0.0)
            d = self.signature.defaults
            v = {n: a.get(n) if a.get(n) is not None else d[n]
                 for n in ("momentum", "weight_decay", "nesterov")}
            mu = _number(kind, "momentum", v["momentum"], 0.0)
            wd = _number(kind, "weight_decay", v["weight_decay"], 0.0)
            nesterov = v["nesterov"]
            if not BOOL.accepts(nesterov):
                raise invalid_arguments(f"{kind}: nesterov must be a bool, got {nesterov!r}")
            if nesterov and mu == 0:
                raise invalid_arguments(f"{kind}: nesterov needs momentum > 0, got momentum "
                                        f"{mu:g}")
            self._n_states = 1 if mu > 0 else 0
            self._nesterov = bool(nesterov)
            self._setup(a, kind)
            self._finish({"learning_rate": lr, "momentum": mu, "weight_decay": wd})

        def get_momentum(self) -> float:
            return self._hyper["momentum"]

        def get_nesterov(self) -> bool:
            return self._nesterov

        def _flags(self) -> dict:
            return dict(momentum=self._n_states == 1, nesterov=self._nesterov,
                        decay=self._hyper["weight_decay"] > 0)

        def _scalars(self, problem) -> dict:
            h = self._hyper
            vals = {"lr": h["learning_rate"], "mu": h["momentum"], "wd": h["weight_decay"]}
            return {n: vals[n] for n in K.scalar_names(problem)}


class adam_update(_optimizer_primitive):
    """Adam (``torch.optim.Adam``, L2 weight decay, no AMSGrad): ``m = beta1 * m + (1 - beta1) *
    g``, ``v = beta2 * v + (1 - beta2) * g^2``, ``param -= learning_rate * m_hat / (sqrt(v_hat)
    + eps)`` with the bias-corrected ``m_hat = m / (1 - beta1^t)``, ``v_hat = v / (1 -
    beta2^t)`` and ``t`` read from ``ARG_OPTIMIZER_STEP``. f32 tensors, any layouts."""

    class primitive_desc(_optimizer_pd):
        """``adam_update.primitive_desc(engine, src_desc, [learning_rate, [beta1, [beta2,
        [eps, [weight_decay]]]]], attr=None, diff_src_desc=None)``; defaults 1e-3, 0.9, 0.999,
        1e-8, 0."""

        _kind = "adam_update"
        _rule = K.ADAM
        _n_states = 2
        signature = Signature(
            "adam_update.primitive_desc", head=("engine", "src_desc"), forms=((),),
            tail=_ADAM_HYPER + ("attr",), keyword_only=("diff_src_desc",),
            kinds={n: NUMBER for n in _ADAM_HYPER},
            defaults={"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                      "weight_decay": 0.0})

        def __init__(self, *args, **kw):
            a = bind(self.signature, args, kw)
            kind = self._kind
            d = self.signature.defaults
            v = {n: a.get(n) if a.get(n) is not None else d[n] for n in _ADAM_HYPER}
            hyper = {"learning_rate": _number(kind, "learning_rate", v["learning_rate"], 0.0),
                     "beta1": _number(kind, "beta1", v["beta1"], 0.0, 1.0, high_open=True),
                     "beta2": _number(kind, "beta2", v["beta2"], 0.0, 1.0, high_open=True),
                     "eps": _number(kind, "eps", v["eps"], 0.0),
                     "weight_decay": _number(kind, "weight_decay", v["weight_decay"], 0.0)}
            self._setup(a, kind)
            self._args[ARG_OPTIMIZER_STEP] = ArgSpec(MemoryDesc([1], data_type.f32, "a"), False)
            self._finish(hyper)

        def step_desc(self) -> MemoryDesc:
            """The desc of ``ARG_OPTIMIZER_STEP``: one f32 element."""
            return self._args[ARG_OPTIMIZER_STEP].md

        def get_beta1(self) -> float:
            return self._hyper["beta1"]

        def get_beta2(self) -> float:
            return self._hyper["beta2"]

        def get_eps(self) -> float:
            return self._hyper["eps"]

        def _flags(self) -> dict:
            return dict(decay=self._hyper["weight_decay"] > 0)

        def _scalars(self, problem) -> dict:
            h = self._hyper
            # 1 - beta in double precision here: in f32 on the device, 1 - 0.999 is off by 1e-5
            vals = {"lr": h["learning_rate"], "beta1": h["beta1"], "beta2": h["beta2"],
                    "one_minus_beta1": 1.0 - h["beta1"], "one_minus_beta2": 1.0 - h["beta2"],
                    "eps": h["eps"], "wd": h["weight_decay"]}
            return {n: vals[n] for n in K.scalar_names(problem)}
