"""AUGRU (oneDNN vanilla_augru): vanilla GRU gates, ũ = (1 − a_t)∘u, h_t = ũ∘h + (1−ũ)∘o."""
from __future__ import annotations

from ._gru_common import GATES, vanilla_stages
from .spec import BiasGate, CellSpec

SPEC = CellSpec(
    name="vanilla_augru",
    alg_kind=0x5FFF,
    n_gates=3,
    n_bias_gates=3,
    gate_names=GATES,
    bias_gates=tuple(BiasGate("gx", g) for g in GATES),
    has_cell_state=False,
    has_attention=True,
    supports_peephole=False,
    supports_projection=False,
    requires_sic_eq_dhc=True,
    stages=vanilla_stages(attention=True),
    doc=__doc__,
)
