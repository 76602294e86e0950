"""Declarative RNN cell specifications.

A :class:`CellSpec` describes one oneDNN RNN cell kind: its structural facts (gate counts,
which optional tensors it accepts) and its elementwise forward formulas as pymbolic
expressions over named per-element variables. Kernel generators turn the formulas into
OpenCL code; backward generators differentiate them with :func:`differentiate`.

Formula schema
--------------
Per-element input variables (all of shape [N, DHC] when evaluated on arrays):

``gx_<gate>``
    layer GEMM result plus the bias of that gate: ``(x @ W)[gate] + B[gate]``.
``gh_<gate>``
    recurrent GEMM result for that gate: ``(s @ U)[gate]`` where ``s`` is the
    :attr:`RecurrentGemm.source` of the stage that needs it (``h_prev`` for most gates,
    ``rh`` = r*h_prev for the vanilla GRU ``o`` gate). A bias gate whose
    :attr:`BiasGate.target` is ``"gh"`` (the LBR ``u'`` bias) is added here, not to ``gx``.
``h_prev``, ``c_prev``
    previous hidden state (before projection: the state that feeds the recurrent GEMM) and
    previous cell state.
``p_i``, ``p_f``, ``p_o``
    peephole weights (LSTM with peephole only).
``att``
    attention value a_t broadcast over channels (AUGRU kinds only).

Functions (pymbolic :class:`~pymbolic.primitives.Variable` objects called with one argument):
``logistic`` (sigma), ``tanh`` and ``act``, the vanilla RNN activation chosen at primitive
creation (relu with negative slope ``alpha``, tanh or logistic). Their derivatives are given
by :data:`FUNCTION_DERIVATIVES`; ``act``'s derivative is the function ``act_d``.

Each :class:`Stage` first runs its recurrent GEMM (producing ``gh_<gate>`` for the listed
gates), then evaluates its assignments in order; an assignment may read any input variable
and any name assigned before it (in this stage or an earlier one). Activated gates are
assigned under the gate's name (``i``, ``f``, ``c_tilde``, ``o``, ``u``, ``r``, ``a``), the new
states under ``c`` and ``h``. For LSTM with projection, ``h`` is the state before projection
(the projection GEMM ``h @ R`` follows the elementwise work). The vanilla GRU kinds have two
stages: the first assigns ``u``, ``r`` and ``rh`` = r*h_prev, the source of the second stage's
recurrent GEMM (``gh_o``).

For the backward pass, :meth:`CellSpec.partials` gives each assignment's partial derivatives
with respect to the variables it reads; reverse mode walks that list backwards, and the
adjoints of ``gh_<gate>`` go back through the recurrent GEMM to its source.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymbolic.primitives as prim
from pymbolic import var
from pymbolic.mapper.dependency import DependencyMapper
from pymbolic.mapper.differentiator import DifferentiationMapper
from pymbolic.mapper.evaluator import EvaluationMapper
from pymbolic.mapper.flattener import flatten
from pymbolic.mapper.substitutor import substitute

Expression = Any  # a pymbolic expression (number or primitives.Expression)

#: Names of the elementwise functions a formula may call.
FUNCTION_NAMES = ("logistic", "tanh", "act", "act_d", "clip", "clip_d")


# --------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Assignment:
    """``name = expr``, one per-element value computed by a stage."""

    name: str
    expr: Expression

    def __str__(self) -> str:
        return f"{self.name} = {self.expr}"


@dataclass(frozen=True)
class RecurrentGemm:
    """The recurrent GEMM run before a stage: ``gh_<g> = (source @ U)[g]`` for ``g`` in gates."""

    source: str
    gates: tuple[str, ...]


@dataclass(frozen=True)
class BiasGate:
    """Where one bias gate is added: ``target`` is ``"gx"`` or ``"gh"``, ``gate`` a gate name."""

    target: str
    gate: str


@dataclass(frozen=True)
class Stage:
    """One elementwise pass: a recurrent GEMM, then ordered assignments."""

    recurrent_gemm: RecurrentGemm
    assignments: tuple[Assignment, ...]

    @property
    def assigned(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.assignments)

    def inputs(self, known: tuple[str, ...] = ()) -> tuple[str, ...]:
        """Free variables this stage reads that it does not assign itself (sorted)."""
        return _free_inputs(self.assignments, known)


@dataclass(frozen=True)
class CellSpec:
    """One oneDNN RNN cell kind."""

    name: str
    alg_kind: int
    n_gates: int
    n_bias_gates: int
    gate_names: tuple[str, ...]
    #: one entry per bias gate, in oneDNN's ldgo order
    bias_gates: tuple[BiasGate, ...]
    has_cell_state: bool
    has_attention: bool
    supports_peephole: bool
    supports_projection: bool
    requires_sic_eq_dhc: bool
    #: forward formulas (without peephole)
    stages: tuple[Stage, ...]
    #: forward formulas with peephole terms (None where unsupported)
    peephole_stages: tuple[Stage, ...] | None = None
    #: names of the new states an iteration produces, in order
    state_outputs: tuple[str, ...] = ("h",)
    #: whether the formulas call ``act`` (vanilla RNN activation chosen at creation)
    uses_activation: bool = False
    doc: str = field(default="", compare=False)

    @property
    def linear_before_reset(self) -> bool:
        """Whether a bias is added to a recurrent GEMM's result (LBR cells): the backward
        pass then reads those results (``gh``) from the workspace."""
        return any(b.target == "gh" for b in self.bias_gates)

    @property
    def reads_reset_state(self) -> bool:
        """Whether a recurrent GEMM reads ``rh`` = r * h_prev made by an earlier stage."""
        return any(st.recurrent_gemm.source == "rh" for st in self.stages)

    def forward_stages(self, peephole: bool = False, clip: bool = False) -> tuple[Stage, ...]:
        """The stages to evaluate, with or without peephole terms; with ``clip`` the new cell
        state ``c`` is wrapped in ``clip(...)`` (cell-state clipping, the range is a
        creation-time constant like the vanilla RNN activation)."""
        if peephole:
            if self.peephole_stages is None:
                raise ValueError(f"cell {self.name!r} has no peephole variant")
            stages = self.peephole_stages
        else:
            stages = self.stages
        if clip:
            if not self.has_cell_state:
                raise ValueError(f"cell {self.name!r} has no cell state to clip")
            stages = tuple(Stage(st.recurrent_gemm, tuple(
                Assignment(a.name, clip_fn(a.expr)) if a.name == "c" else a
                for a in st.assignments)) for st in stages)
        return stages

    def assignments(self, peephole: bool = False) -> tuple[Assignment, ...]:
        """All assignments of all stages, in evaluation order."""
        return tuple(a for s in self.forward_stages(peephole) for a in s.assignments)

    def inputs(self, peephole: bool = False) -> tuple[str, ...]:
        """Free variables of the whole cell (GEMM results, states, peephole, attention)."""
        return _free_inputs(self.assignments(peephole), ())

    def expression(self, name: str, peephole: bool = False) -> Expression:
        """The formula of an assigned value with all earlier assignments substituted in."""
        env: dict[str, Expression] = {}
        for a in self.assignments(peephole):
            env[a.name] = substitute(a.expr, env)
            if a.name == name:
                return env[name]
        raise KeyError(f"cell {self.name!r} assigns no value named {name!r}")

    def partials(self, peephole: bool = False) -> tuple[tuple[str, dict[str, Expression]], ...]:
        """For each assignment, in evaluation order, the partial derivatives of its expression
        with respect to every variable it reads directly (inputs or earlier assignments).

        Reverse-mode backward is a walk over this list from the end:
        ``adj[v] += adj[name] * d`` for each ``(v, d)`` of each ``(name, partials)``.
        """
        dep = DependencyMapper(include_calls="descend_args", include_subscripts=False,
                               include_lookups=False)
        out = []
        for a in self.assignments(peephole):
            names = sorted(v.name for v in dep(a.expr))
            out.append((a.name, {v: differentiate(a.expr, v) for v in names}))
        return tuple(out)

    def bias_gate_index(self, target: str, gate: str) -> int | None:
        for k, b in enumerate(self.bias_gates):
            if b.target == target and b.gate == gate:
                return k
        return None

    def __str__(self) -> str:
        lines = [f"{self.name} (alg_kind {self.alg_kind:#x}, gates {self.gate_names})"]
        for k, st in enumerate(self.stages):
            g = st.recurrent_gemm
            lines.append(f"  stage {k}: gh_{{{','.join(g.gates)}}} = {g.source} @ U")
            lines += [f"    {a}" for a in st.assignments]
        return "\n".join(lines)


def _free_inputs(assignments: tuple[Assignment, ...], known: tuple[str, ...]) -> tuple[str, ...]:
    dep = DependencyMapper(include_calls="descend_args", include_subscripts=False,
                           include_lookups=False)
    assigned: set[str] = set(known)
    free: set[str] = set()
    for a in assignments:
        for v in dep(a.expr):
            if v.name not in assigned:
                free.add(v.name)
        assigned.add(a.name)
    return tuple(sorted(free))


# --------------------------------------------------------------------------------------------
# Building blocks used by the cell modules
# --------------------------------------------------------------------------------------------
logistic = var("logistic")
tanh = var("tanh")
act = var("act")
act_d = var("act_d")
clip_fn = var("clip")
clip_d = var("clip_d")


def gx(gate: str) -> prim.Variable:
    return var(f"gx_{gate}")


def gh(gate: str) -> prim.Variable:
    return var(f"gh_{gate}")


def assign(name: str, expr: Expression) -> Assignment:
    return Assignment(name, expr)


# --------------------------------------------------------------------------------------------
# Differentiation
# --------------------------------------------------------------------------------------------
def _derivative_of_call(i: int, func: Expression, pars: tuple, allowed_nonsmoothness: str = "none"):
    if not isinstance(func, prim.Variable) or len(pars) != 1 or i != 0:
        raise ValueError(f"cannot differentiate call of {func} with {len(pars)} arguments")
    (x,) = pars
    if func.name == "logistic":
        return logistic(x) * (1 - logistic(x))
    if func.name == "tanh":
        return 1 - tanh(x) ** 2
    if func.name == "act":
        return act_d(x)
    if func.name == "clip":
        return clip_d(x)
    raise ValueError(f"no derivative known for function {func.name!r}")


#: d f(x) / dx for each function a formula may call, as pymbolic expressions of ``x``.
FUNCTION_DERIVATIVES: dict[str, Expression] = {
    "logistic": _derivative_of_call(0, logistic, (var("x"),)),
    "tanh": _derivative_of_call(0, tanh, (var("x"),)),
    "act": _derivative_of_call(0, act, (var("x"),)),
    "clip": _derivative_of_call(0, clip_fn, (var("x"),)),
}


def differentiate(expr: Expression, variable: str | prim.Variable) -> Expression:
    """d expr / d variable, knowing the derivatives of ``logistic``, ``tanh`` and ``act``."""
    if isinstance(variable, str):
        variable = var(variable)
    return flatten(DifferentiationMapper(variable, _derivative_of_call)(expr))


# --------------------------------------------------------------------------------------------
# Numerical evaluation (tests, debugging)
# --------------------------------------------------------------------------------------------
def _np_logistic(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def activation_functions(activation: str = "tanh", alpha: float = 0.0) -> dict[str, Callable]:
    """numpy implementations of ``act`` and ``act_d`` for a vanilla RNN activation."""
    if activation == "relu":
        return {"act": lambda x: np.where(x > 0, x, alpha * x),
                "act_d": lambda x: np.where(x > 0, 1.0, alpha).astype(np.asarray(x).dtype)}
    if activation == "tanh":
        return {"act": np.tanh, "act_d": lambda x: 1 - np.tanh(x) ** 2}
    if activation == "logistic":
        return {"act": _np_logistic,
                "act_d": lambda x: _np_logistic(x) * (1 - _np_logistic(x))}
    raise ValueError(f"activation must be 'relu', 'tanh' or 'logistic', got {activation!r}")


def clip_functions(clip: tuple | None) -> dict[str, Callable]:
    """numpy ``clip`` and ``clip_d`` for a cell-state clip ``(min, max, nan_to_min)``."""
    if clip is None:
        return {}
    lo, hi, nan = clip

    def f(x):
        x = np.asarray(x)
        y = np.where(x > hi, hi, np.where(x < lo, lo, x)).astype(x.dtype)
        return np.where(np.isnan(x), lo, y).astype(x.dtype) if nan else y

    def d(x):
        x = np.asarray(x)
        return ((x > lo) & (x < hi)).astype(x.dtype)

    return {"clip": f, "clip_d": d}


def numpy_functions(activation: str = "tanh", alpha: float = 0.0,
                    clip: tuple | None = None) -> dict[str, Callable]:
    """The function context for evaluating formulas on numpy arrays."""
    return {"logistic": _np_logistic, "tanh": np.tanh, **activation_functions(activation, alpha),
            **clip_functions(clip)}


def evaluate(expr: Expression, values: Mapping[str, Any], activation: str = "tanh",
             alpha: float = 0.0) -> Any:
    """Evaluate one expression on numpy arrays (or scalars) given by name."""
    ctx = {**numpy_functions(activation, alpha), **values}
    return EvaluationMapper(ctx)(expr)


def evaluate_cell(
    spec: CellSpec,
    values: Mapping[str, Any],
    *,
    peephole: bool = False,
    activation: str = "tanh",
    alpha: float = 0.0,
    recurrent_gemm: Callable[[Any, tuple[str, ...]], Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Evaluate a cell's stages on numpy arrays; returns inputs and every assigned value.

    ``values`` maps input names to arrays. Before each stage, ``gh_<gate>`` values missing
    from ``values`` are obtained as ``recurrent_gemm(source_array, gates)`` (a mapping from
    gate name to array); without a callback they must all be given.
    """
    ctx: dict[str, Any] = {**numpy_functions(activation, alpha), **values}
    mapper = EvaluationMapper(ctx)
    for st in spec.forward_stages(peephole):
        g = st.recurrent_gemm
        missing = tuple(x for x in g.gates if f"gh_{x}" not in ctx)
        if missing:
            if recurrent_gemm is None:
                raise ValueError(f"gh_{missing[0]} not given and no recurrent_gemm callback")
            got = recurrent_gemm(ctx[g.source], missing)
            for x in missing:
                ctx[f"gh_{x}"] = got[x]
        for a in st.assignments:
            ctx[a.name] = mapper(a.expr)
    fn = set(FUNCTION_NAMES)
    return {k: v for k, v in ctx.items() if k not in fn}
