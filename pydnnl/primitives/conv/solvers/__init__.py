"""Convolution algorithms as solvers (MIOpen's design).

Each solver says whether it applies to a :class:`~pydnnl.conv_shapes.ConvProblem`,
how much scratchpad it needs, which tuning parameters it has and how to build its
:class:`~pydnnl.runtime.plan.Plan`. ``find`` asks every applicable solver and ranks
them by measured time; ``convolution_auto`` asks the perf database, else :func:`heuristic`.
"""
from __future__ import annotations

from ....conv_shapes import ConvGeometry
from ....runtime.heuristics import conv as rules
from .base import Solver
from .direct import DirectSolver
from .fft import FftSolver, saving
from .im2col_gemm import Im2colGemmSolver
from .implicit_gemm import ImplicitGemmSolver
from .winograd_f2x3 import WinogradF2x3Solver


def _registry() -> dict[str, Solver]:
    out = {}
    for cls in (DirectSolver, Im2colGemmSolver, ImplicitGemmSolver, WinogradF2x3Solver,
                FftSolver):
        s = cls()
        out[s.name] = s
    return out


_SOLVERS: dict[str, Solver] | None = None


def solvers() -> dict[str, Solver]:
    """Every solver by name."""
    global _SOLVERS
    if _SOLVERS is None:
        _SOLVERS = _registry()
    return _SOLVERS


def get_solver(name: str) -> Solver:
    s = solvers().get(name)
    if s is None:
        from ....error import invalid_arguments

        raise invalid_arguments(
            f"convolution: unknown solver {name!r}; known: {', '.join(solvers())}")
    return s


def heuristic_order(kind: str, geom: ConvGeometry, engine, math: str = "strict") -> list[str]:
    """Solver names, most promising first, from the problem's shape and the device
    (:func:`pydnnl.runtime.heuristics.conv.solver_order`; ``math``: what the fpmath mode
    lets the GEMMs compute in), limited to the solvers present.
    ``geom``: the convolution's geometry (a deconvolution's
    :meth:`~pydnnl.conv_shapes.ConvGeometry.as_convolution`)."""
    order = rules.solver_order(kind, geom, engine.info, saving(kind, geom), math)
    return [n for n in order if n in solvers()]


__all__ = ["Solver", "solvers", "get_solver", "heuristic_order"]
