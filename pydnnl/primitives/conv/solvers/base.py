"""The interface every convolution solver implements (MIOpen's ``IsApplicable``,
``GetWorkspaceSize``, ``GetSolution`` and tunable performance configs)."""
from __future__ import annotations

from ....conv_shapes import ConvProblem


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

    def weights_any(self, problem: ConvProblem, engine, dims: tuple) -> str | None:
        """A blocked tag for a forward's weights ``format_tag.any`` (non-grouped ``dims``,
        no hint) that this solver reads faster than the order of :meth:`preferred`, given
        ``problem`` with the weights in that order; None keeps that order."""
        return None
