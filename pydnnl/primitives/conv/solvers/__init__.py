"""Convolution algorithms as solvers (MIOpen's design).

Each solver says whether it applies to a :class:`~pydnnl.conv_shapes.ConvProblem`,
how much scratchpad it needs, which tuning parameters it has and how to build its
:class:`~pydnnl.runtime.plan.Plan`. ``find`` asks every applicable solver and ranks
them by measured time; ``convolution_auto`` asks the perf database, else :func:`heuristic`.
"""
from __future__ import annotations

from ....conv_shapes import ConvGeometry, ConvProblem
from ....runtime.heuristics import conv as rules


class Solver:
    """Interface of a convolution solver."""

    #: identifier (perf database, ``impl_info_str``, the ``solver=`` keyword)
    name = ""
    #: the oneDNN algorithm family: ``direct`` (any non-Winograd method) or ``winograd``
    family = "direct"

    def is_applicable(self, problem: ConvProblem, engine) -> bool:
        return True

    def why_not(self, problem: ConvProblem, engine) -> str:
        """Why the solver does not apply ('' when it does)."""
        return ""

    def default_params(self, problem: ConvProblem, engine) -> dict:
        return {}

    def tuning_space(self, problem: ConvProblem, engine) -> list[dict]:
        return [self.default_params(problem, engine)]

    def workspace_bytes(self, problem: ConvProblem, params: dict | None = None) -> int:
        return 0

    def build_plan(self, problem: ConvProblem, params: dict, engine):
        raise NotImplementedError

    # layouts the solver runs fastest on, for format_tag.any: "nchw" or "nhwc" for the
    # activations; for the weights an order of the roles g, o (output channels), i (input
    # channels), k (taps), outermost first
    act_family = "nchw"
    wei_order = "goik"

    def preferred(self, kind: str, nsp: int) -> tuple[str, str]:
        return self.act_family, self.wei_order


def _registry() -> dict[str, Solver]:
    from .direct import DirectSolver
    from .fft import FftSolver
    from .im2col_gemm import Im2colGemmSolver
    from .implicit_gemm import ImplicitGemmSolver
    from .winograd_f2x3 import WinogradF2x3Solver

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


def heuristic_order(kind: str, geom: ConvGeometry, engine) -> list[str]:
    """Solver names, most promising first, from the problem's shape and the device
    (:func:`pydnnl.runtime.heuristics.conv.solver_order`), limited to the solvers present.
    ``geom``: the convolution's geometry (a deconvolution's
    :meth:`~pydnnl.conv_shapes.ConvGeometry.as_convolution`)."""
    from .fft import saving

    order = rules.solver_order(kind, geom, engine.info, saving(kind, geom))
    return [n for n in order if n in solvers()]


__all__ = ["Solver", "solvers", "get_solver", "heuristic_order"]
