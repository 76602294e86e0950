"""Loopy generator of the per-step RNN backward elementwise kernel of one cell stage.

Reverse-mode differentiation of the stage's formulas from the cell spec. Forward values come
from the workspace (activated gates, cell states, previous states, the LBR ``gh``);
intermediates that were not stored (``rh``, ``u_tilde``) are recomputed. The derivative of an
activation is taken from its stored output (``σ' = y(1-y)``, ``tanh' = 1-y²``, relu from the
sign of y), as oneDNN does. Adjoints flow in from ``h`` (the step's output gradient), ``c``
(next step), ``rh`` (the next stage's GEMM) and gates of earlier stages used by later ones
("carry"); out go the gradients of the pre-activations (``dgx``: the layer GEMM's part,
``dgh``: the recurrent GEMM's part), of ``c_prev``, of ``h_prev`` (its direct elementwise
part, added), of the peephole weights and the attention (per element, reduced later), and of
carried gates.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..cells import get_cell
from ..cells.spec import differentiate

OFFSET_ARGS = ("gates_off", "c_off", "c_prev_off", "h_prev_off", "att_off", "peep_off",
               "bias_off", "gh_off", "dh_a_off", "dh_b_off", "dc_off", "dc_prev_off",
               "drh_off", "dgx_off", "dgh_off", "dhp_off", "datt_off", "dpeep_off", "rh_off",
               "carry_off")
_FN = ("logistic", "tanh", "act", "clip")
_PEEP = ("p_i", "p_f", "p_o")


@dataclass(frozen=True)
class BackwardElementwiseProblem:
    """What one backward stage kernel depends on (the kernel-cache key)."""

    cell: str
    stage: int
    peephole: bool
    activation: str
    alpha: float
    dhc: int
    ld_h_prev: int  # row stride of h_prev and of its gradient (SIC)
    ld_dh: int  # row stride of the h gradient buffers (DIC, or DHC for LSTMP's dht)
    two_dh: bool  # the h gradient is dh_a + dh_b (layer gradient + recurrent gradient)
    wg: int = 32
    clip: tuple | None = None  # LSTM cell-state clip (min, max, nan_to_min)
    dhp_assign: bool = False  # the first writer of the h_prev gradient: store, not accumulate


def _vars(expr) -> set[str]:
    from pymbolic.mapper.dependency import DependencyMapper

    dep = DependencyMapper(include_calls="descend_args", include_subscripts=False,
                           include_lookups=False)
    return {v.name for v in dep(expr)}


def _is_fn(expr) -> bool:
    import pymbolic.primitives as prim

    return isinstance(expr, prim.Call) and getattr(expr.function, "name", None) in _FN


def _fprime_out(fn: str, y, activation: str):
    """f'(x) written with y = f(x): what the workspace lets us evaluate."""
    import pymbolic.primitives as prim
    from pymbolic import var

    if fn == "clip":  # y strictly inside the range: not clamped (a NaN fails both tests)
        return prim.If(prim.LogicalAnd((prim.Comparison(y, ">", var("clip_lo_const")),
                                        prim.Comparison(y, "<", var("clip_hi_const")))), 1, 0)
    if fn == "act":
        fn = {"relu": "relu", "tanh": "tanh", "logistic": "logistic"}[activation]
    if fn == "logistic":
        return y * (1 - y)
    if fn == "tanh":
        return 1 - y * y
    return prim.If(prim.Comparison(y, ">", 0), 1, var("alpha_const"))


@dataclass(frozen=True)
class _Analysis:
    stage_gates: tuple[str, ...]
    carried_in: tuple[str, ...]  # gates of this stage whose adjoints later stages produced
    carried_out: tuple[str, ...]  # gates of earlier stages this stage reads
    partials: tuple  # per assignment (reverse order): (name, ((var, symbolic derivative), ...))
    needed: frozenset  # forward values the derivatives and recomputations read
    recompute: tuple[str, ...]  # intermediates recomputed (forward order)
    buffers: tuple  # (name, written)


@lru_cache(maxsize=None)
def analyze(p: BackwardElementwiseProblem) -> _Analysis:
    from pymbolic import var

    spec = get_cell(p.cell)
    stages = spec.forward_stages(p.peephole, p.clip is not None)
    st = stages[p.stage]
    names_in = set(st.inputs(()))
    later_inputs = set()
    for s in stages[p.stage + 1:]:
        later_inputs |= set(s.inputs(()))
    earlier = {a.name for s in stages[: p.stage] for a in s.assignments}
    carried_in = tuple(a.name for a in st.assignments
                       if a.name in later_inputs and a.name in spec.gate_names)
    carried_out = tuple(g for g in spec.gate_names if g in names_in and g in earlier)

    parts = []
    needed: set[str] = set()
    for a in reversed(st.assignments):
        lst = []
        if _is_fn(a.expr):
            outer = _fprime_out(a.expr.function.name, var(a.name), p.activation)
            inner = a.expr.parameters[0]
            for v in sorted(_vars(inner)):
                d = differentiate(inner, v)
                if d != 0:
                    lst.append((v, outer * d))
        else:
            for v in sorted(_vars(a.expr)):
                d = differentiate(a.expr, v)
                if d != 0:
                    lst.append((v, d))
        for _, d in lst:
            needed |= _vars(d)
        parts.append((a.name, tuple(lst)))
    needed -= {"alpha_const", "clip_lo_const", "clip_hi_const"}
    # recompute non-stored intermediates the derivatives need (and what they need)
    stored = set(spec.gate_names) | {"c"}
    recompute: list[str] = []
    exprs = {a.name: a.expr for a in st.assignments}
    changed = True
    while changed:
        changed = False
        for name in list(needed):
            if name in exprs and name not in stored and name not in recompute:
                recompute.append(name)
                needed |= _vars(exprs[name])
                changed = True
    if "rh" in exprs:  # the vanilla GRU o-gate GEMM source: backward needs it for dU_o
        if "rh" not in recompute:
            recompute.append("rh")
            needed |= _vars(exprs["rh"])
    order = [a.name for a in st.assignments]
    recompute.sort(key=order.index)

    bufs: dict[str, bool] = {"gates": False}
    if "c" in needed or "c_prev" in needed:
        pass
    if "c" in needed:
        bufs["c"] = False
    if "c_prev" in names_in:
        bufs["dc_prev"] = True
        if "c_prev" in needed:
            bufs["c_prev"] = False
    if "h_prev" in names_in:
        bufs["dhp"] = True
        if "h_prev" in needed:
            bufs["h_prev"] = False
    if "att" in names_in:
        bufs["datt"] = True
        if "att" in needed:
            bufs["att"] = False
    if any(v in needed for v in _PEEP):
        bufs["peep"] = False
    if any(v in names_in for v in _PEEP):
        bufs["dpeep"] = True
    if any(v.startswith("gh_") for v in needed):
        bufs["gh"] = False
        bufs["bias"] = False
    if "h" in st.assigned:
        bufs["dh_a"] = False
        if p.two_dh:
            bufs["dh_b"] = False
    if "c" in st.assigned:
        bufs["dc"] = False
    if "rh" in st.assigned:
        bufs["drh"] = False
        bufs["rh"] = True
    if carried_in or carried_out:
        bufs["carry"] = bool(carried_out)
    bufs["dgx"] = True
    bufs["dgh"] = True
    return _Analysis(stage_gates=st.recurrent_gemm.gates, carried_in=carried_in,
                     carried_out=carried_out, partials=tuple(parts), needed=frozenset(needed),
                     recompute=tuple(recompute), buffers=tuple(bufs.items()))


def backward_buffers(p: BackwardElementwiseProblem) -> dict[str, bool]:
    """Buffers the kernel uses -> whether it writes them."""
    return dict(analyze(p).buffers)


def stage_ops(p: BackwardElementwiseProblem, emit, store) -> None:
    """The backward stage as a sequence of calls: ``emit(name, expr)`` evaluates a private
    value (it returns the variable that holds it), ``store(target, expr, id)`` writes a buffer
    element; expressions are pymbolic over the buffers (``var(buf)[offset + index]``), the
    offset arguments of :data:`OFFSET_ARGS`, ``n`` (batch row) and ``j`` (channel). The loopy
    kernel and the grid-wide one-launch backward print the same sequence."""
    from pymbolic import var
    from pymbolic.mapper.substitutor import substitute

    from .rnn_elementwise import _FunctionInliner

    an = analyze(p)
    spec = get_cell(p.cell)
    st = spec.forward_stages(p.peephole, p.clip is not None)[p.stage]
    bufs = dict(an.buffers)
    G, DHC = spec.n_gates, p.dhc
    gates = spec.gate_names
    n, j = var("n"), var("j")

    def gate_at(buf, off, g):
        return var(buf)[var(off) + (n * G + gates.index(g)) * DHC + j]

    inline = _FunctionInliner(p.activation, p.alpha, p.clip)
    subst_base = {"alpha_const": np.float32(p.alpha)}
    if p.clip is not None:
        subst_base.update(clip_lo_const=np.float32(p.clip[0]), clip_hi_const=np.float32(p.clip[1]))

    # -- forward values ----------------------------------------------------------------------
    val: dict[str, object] = dict(subst_base)
    for v in sorted(an.needed):
        if v in gates:
            val[v] = emit(f"v_{v}", gate_at("gates", "gates_off", v))
        elif v == "c":
            val[v] = emit("v_c", var("c")[var("c_off") + n * DHC + j])
        elif v == "c_prev":
            val[v] = emit("v_c_prev", var("c_prev")[var("c_prev_off") + n * DHC + j])
        elif v == "h_prev":
            val[v] = emit("v_h_prev", var("h_prev")[var("h_prev_off") + n * p.ld_h_prev + j])
        elif v == "att":
            val[v] = emit("v_att", var("att")[var("att_off") + n])
        elif v in _PEEP:
            val[v] = emit(f"v_{v}", var("peep")[var("peep_off") + _PEEP.index(v) * DHC + j])
        elif v.startswith("gh_"):
            g = v[3:]
            e = gate_at("gh", "gh_off", g)
            b = spec.bias_gate_index("gh", g)
            if b is not None:
                e = e + var("bias")[var("bias_off") + b * DHC + j]
            val[v] = emit(f"v_{v}", e)
    exprs = {a.name: a.expr for a in st.assignments}
    for name in an.recompute:
        val[name] = emit(f"v_{name}", inline(substitute(exprs[name], val)))
    if "rh" in bufs:
        store(var("rh")[var("rh_off") + n * DHC + j], val["rh"], "s_rh_value")

    # -- seeds ---------------------------------------------------------------------------------
    adj: dict[str, object] = {}

    def add(name, e):
        adj[name] = e if name not in adj else adj[name] + e

    if "h" in st.assigned:
        e = var("dh_a")[var("dh_a_off") + n * p.ld_dh + j]
        if p.two_dh:
            e = e + var("dh_b")[var("dh_b_off") + n * p.ld_dh + j]
        add("h", e)
    if "c" in st.assigned:
        add("c", var("dc")[var("dc_off") + n * DHC + j])
    if "rh" in st.assigned:
        add("rh", var("drh")[var("drh_off") + n * DHC + j])
    for g in an.carried_in:
        add(g, gate_at("carry", "carry_off", g))

    # -- reverse sweep ---------------------------------------------------------------------------
    for name, lst in an.partials:
        if name not in adj:
            continue
        abar = emit(f"a_{name}", adj.pop(name))
        for v, d in lst:
            add(v, abar * inline(substitute(d, val)))

    # -- outputs -----------------------------------------------------------------------------
    zero = np.float32(0)
    for g in an.stage_gates:
        store(gate_at("dgx", "dgx_off", g), adj.get(f"gx_{g}", zero), f"s_dgx_{g}")
        store(gate_at("dgh", "dgh_off", g), adj.get(f"gh_{g}", zero), f"s_dgh_{g}")
    if "dc_prev" in bufs:
        store(var("dc_prev")[var("dc_prev_off") + n * DHC + j], adj.get("c_prev", zero),
              "s_dc_prev")
    if "dhp" in bufs:
        tgt = var("dhp")[var("dhp_off") + n * p.ld_h_prev + j]
        store(tgt, adj.get("h_prev", zero) if p.dhp_assign else tgt + adj.get("h_prev", zero),
              "s_dhp")
    if "datt" in bufs:
        store(var("datt")[var("datt_off") + n * DHC + j], adj.get("att", zero), "s_datt")
    if "dpeep" in bufs:
        for k, pn in enumerate(_PEEP):
            store(var("dpeep")[var("dpeep_off") + (n * 3 + k) * DHC + j], adj.get(pn, zero),
                  f"s_d{pn}")
    for g in an.carried_out:
        store(gate_at("carry", "carry_off", g), adj.get(g, zero), f"s_carry_{g}")



def build_elementwise_bwd(p: BackwardElementwiseProblem):
    """The kernel of one backward stage: printed OpenCL C
    (:func:`~pydnnl.kernels.rnn_elementwise_source.elementwise_bwd_source`) where it covers
    ``p``, else loopy's."""
    from .rnn_elementwise_source import elementwise_bwd_source

    src = elementwise_bwd_source(p)
    return src if src is not None else build_elementwise_bwd_loopy(p)


def build_elementwise_bwd_loopy(p: BackwardElementwiseProblem):
    """loopy TranslationUnit of one backward stage: buffers, then int32 offsets."""
    import loopy as lp
    from pymbolic import var

    spec = get_cell(p.cell)
    bufs = dict(analyze(p).buffers)
    DHC = p.dhc
    insns, temps = [], []
    chain = [None]

    def dep():
        return frozenset([chain[0]]) if chain[0] else frozenset()

    def emit(name, expr):
        tname = f"t_{name}"
        temps.append(lp.TemporaryVariable(tname, np.float32, shape=(),
                                          address_space=lp.AddressSpace.PRIVATE))
        insns.append(lp.Assignment(var(tname), expr, id=f"i_{name}", depends_on_is_final=True,
                                   depends_on=dep(), within_inames=frozenset(["n", "j"])))
        chain[0] = f"i_{name}"
        return var(tname)

    def store(target, expr, sid):
        insns.append(lp.Assignment(target, expr, id=sid, depends_on_is_final=True,
                                   depends_on=dep(), within_inames=frozenset(["n", "j"])))
        chain[0] = sid

    stage_ops(p, emit, store)

    ids = [i.id for i in insns]
    nosync = frozenset((i, "any") for i in ids)
    insns = [i.copy(no_sync_with=nosync) for i in insns]
    args = [lp.GlobalArg(b, np.float32, shape=None, is_output=w, is_input=(not w) or b == "carry"
                          or (b == "dhp" and not p.dhp_assign))
            for b, w in bufs.items()]
    # the batch only sizes the grid: one kernel serves every batch size
    args += [lp.ValueArg(o, np.int32) for o in OFFSET_ARGS + ("batch",)]
    knl = lp.make_kernel(f"{{[n, j]: 0 <= n < batch and 0 <= j < {DHC}}}", insns, args + temps,
                         name=f"rnn_bwd_{spec.name}_s{p.stage}", lang_version=(2018, 2),
                         target=lp.PyOpenCLTarget(), seq_dependencies=False)
    wg = min(p.wg, DHC)
    knl = lp.split_iname(knl, "j", wg, inner_tag="l.0", outer_tag="g.0")
    knl = lp.tag_inames(knl, {"n": "g.1"})
    return knl
