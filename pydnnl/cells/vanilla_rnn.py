"""Vanilla RNN cell: h_t = act(W x + U h + B), act = relu (slope alpha), tanh or logistic."""
from __future__ import annotations

from pymbolic import var

from .spec import BiasGate, CellSpec, RecurrentGemm, Stage, act, assign, gh, gx

SPEC = CellSpec(
    name="vanilla_rnn",
    alg_kind=0x1FFF,
    n_gates=1,
    n_bias_gates=1,
    gate_names=("a",),
    bias_gates=(BiasGate("gx", "a"),),
    has_cell_state=False,
    has_attention=False,
    supports_peephole=False,
    supports_projection=False,
    requires_sic_eq_dhc=False,
    stages=(
        Stage(RecurrentGemm("h_prev", ("a",)), (
            assign("a", act(gx("a") + gh("a"))),
            assign("h", var("a")),
        )),
    ),
    state_outputs=("h",),
    uses_activation=True,
    doc=__doc__,
)
