"""LSTM cell (oneDNN vanilla_lstm), optionally with peephole and projection.

i = σ(W_i x + U_i h + B_i [+ P_i c_{t-1}]), f = σ(W_f x + U_f h + B_f [+ P_f c_{t-1}]),
c̃ = tanh(W_c x + U_c h + B_c), c_t = f c_{t-1} + i c̃, o = σ(W_o x + U_o h + B_o [+ P_o c_t]),
h_t = o tanh(c_t) [then h_t @ R with projection].
"""
from __future__ import annotations

from pymbolic import var

from .spec import BiasGate, CellSpec, RecurrentGemm, Stage, assign, gh, gx, logistic, tanh

GATES = ("i", "f", "c_tilde", "o")


def _stages(peephole: bool) -> tuple[Stage, ...]:
    c_prev, c = var("c_prev"), var("c")

    def pre(g: str):
        return gx(g) + gh(g)

    pi = pre("i") + var("p_i") * c_prev if peephole else pre("i")
    pf = pre("f") + var("p_f") * c_prev if peephole else pre("f")
    po = pre("o") + var("p_o") * c if peephole else pre("o")
    i, f, ct, o = (var(g) for g in GATES)
    return (
        Stage(RecurrentGemm("h_prev", GATES), (
            assign("i", logistic(pi)),
            assign("f", logistic(pf)),
            assign("c_tilde", tanh(pre("c_tilde"))),
            assign("c", f * c_prev + i * ct),
            assign("o", logistic(po)),
            assign("h", o * tanh(c)),
        )),
    )


SPEC = CellSpec(
    name="vanilla_lstm",
    alg_kind=0x2FFF,
    n_gates=4,
    n_bias_gates=4,
    gate_names=GATES,
    bias_gates=tuple(BiasGate("gx", g) for g in GATES),
    has_cell_state=True,
    has_attention=False,
    supports_peephole=True,
    supports_projection=True,
    requires_sic_eq_dhc=False,
    stages=_stages(False),
    peephole_stages=_stages(True),
    state_outputs=("c", "h"),
    doc=__doc__,
)
