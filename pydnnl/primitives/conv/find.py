"""MIOpen-style Find for convolutions: time every applicable solver, rank, remember the best.

``convolution_forward.find(engine, prop_kind, src_desc, weights_desc, bias_desc, dst_desc,
strides, dilates, padding_l, padding_r, attr=None, exhaustive=False)`` (the backward and
deconvolution primitives likewise, with their own descriptor lists and without prop_kind)
builds the problem once per solver, runs its plan on scratch tensors with profiling events
(:func:`pydnnl.tuning.time_launch`) and returns :class:`ConvFindResult` s, fastest first. With
``exhaustive`` every point of each solver's tuning space is timed. The best is stored in the
perf database (family ``conv_find``, keyed by the device and the problem as the user
described it, ``format_tag.any`` included), where a later ``convolution_auto`` descriptor of
the same problem finds it without searching.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...constants import algorithm
from ...error import error, out_of_memory, unimplemented
from ...memory import memory
from .solvers import solvers

FIND_FAMILY = "conv_find"  # the perf database family of find results


@dataclass
class ConvFindResult:
    """One solver's measurement (``miopenConvAlgoPerf_t``-like)."""

    solver: str
    algorithm: algorithm
    time_ms: float
    workspace_bytes: int
    params: dict = field(default_factory=dict)


def _alg(op: str, family: str) -> algorithm:
    if op == "convolution":
        return (algorithm.convolution_winograd if family == "winograd"
                else algorithm.convolution_direct)
    return (algorithm.deconvolution_winograd if family == "winograd"
            else algorithm.deconvolution_direct)


def find(prim_cls, args: tuple, kw: dict, exhaustive: bool = False) -> list[ConvFindResult]:
    """Time every solver on the problem ``prim_cls.primitive_desc(*args, **kw)`` describes
    (its positional form without the algorithm); fastest first."""
    from ...tuning import PerfDB, time_launch

    pd_cls = prim_cls.primitive_desc
    sig = pd_cls.signature
    nhead = sig.head.index("algorithm")  # find's forms are the pd's without the algorithm
    head, rest = list(args[:nhead]), list(args[nhead:])
    kw = dict(kw)
    if any(sig.aliases.get(k, k) == "algorithm" for k in kw):
        raise error("find: the algorithm is what find chooses; do not pass one")

    def make(**extra):
        return pd_cls(*head, algorithm.convolution_auto, *rest, **kw, _use_db=False, **extra)

    probe = make()  # validates the problem (raises on bad arguments)
    eng = probe.get_engine()
    rng = np.random.default_rng(0)
    results: list[ConvFindResult] = []
    for name, s in solvers().items():
        try:
            pd = make(solver=name)
        except (unimplemented, out_of_memory):  # too big for the device: not a candidate
            continue
        spaces = s.tuning_space(pd._problem_, eng) if exhaustive else [pd.get_solver_params()]
        mems = None
        for params in spaces:
            try:
                ppd = make(solver=name, solver_params=params)
                prim = prim_cls(ppd)
            except error:
                continue
            if mems is None:
                mems = {}
                for arg, spec in ppd.arg_specs().items():
                    m = memory(spec.md, eng)
                    if spec.md.nelems():
                        m.write(rng.standard_normal(spec.md.dims).astype(np.float32) * 0.1)
                    mems[arg] = m
            ms = time_launch(eng, lambda st, prim=prim, mems=mems: prim._execute(st, mems))
            results.append(ConvFindResult(name, _alg(pd_cls._op, s.family), ms,
                                          ppd.workspace_bytes(), ppd.get_solver_params()))
    if not results:
        raise unimplemented(f"{pd_cls._kind}.find: no solver applies to the problem")
    results.sort(key=lambda r: r.time_ms)
    best = results[0]
    PerfDB.default().put(eng.info.signature, FIND_FAMILY, probe.find_key(),
                         {"solver": best.solver, "params": best.params}, best.time_ms)
    return results


__all__ = ["ConvFindResult", "FIND_FAMILY", "find"]
