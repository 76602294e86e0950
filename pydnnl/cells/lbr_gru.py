"""Linear-before-reset GRU (oneDNN lbr_gru): o = tanh(W_o x + B_o + r∘(U_o h + B_u')).
Bias has 4 gates (u, r, o, u'); u' is added to the recurrent GEMM result of o."""
from __future__ import annotations

from ._gru_common import GATES, lbr_stages
from .spec import BiasGate, CellSpec

SPEC = CellSpec(
    name="lbr_gru",
    alg_kind=0x4FFF,
    n_gates=3,
    n_bias_gates=4,
    gate_names=GATES,
    bias_gates=tuple(BiasGate("gx", g) for g in GATES) + (BiasGate("gh", "o"),),
    has_cell_state=False,
    has_attention=False,
    supports_peephole=False,
    supports_projection=False,
    requires_sic_eq_dhc=True,
    stages=lbr_stages(attention=False),
    doc=__doc__,
)
