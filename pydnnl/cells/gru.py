"""GRU cell (oneDNN vanilla_gru): u, r gates, o = tanh(W_o x + U_o (r∘h) + B_o),
h_t = u∘h + (1−u)∘o. Two stages: the o gate's recurrent GEMM reads r∘h_prev."""
from __future__ import annotations

from ._gru_common import GATES, vanilla_stages
from .spec import BiasGate, CellSpec

SPEC = CellSpec(
    name="vanilla_gru",
    alg_kind=0x3FFF,
    n_gates=3,
    n_bias_gates=3,
    gate_names=GATES,
    bias_gates=tuple(BiasGate("gx", g) for g in GATES),
    has_cell_state=False,
    has_attention=False,
    supports_peephole=False,
    supports_projection=False,
    requires_sic_eq_dhc=True,
    stages=vanilla_stages(attention=False),
    doc=__doc__,
)
