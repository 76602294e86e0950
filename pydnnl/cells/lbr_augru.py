"""LBR-AUGRU (oneDNN lbr_augru): LBR-GRU gates with the AUGRU attention update."""
from __future__ import annotations

from ._gru_common import GATES, lbr_stages
from .spec import BiasGate, CellSpec

SPEC = CellSpec(
    name="lbr_augru",
    alg_kind=0x6FFF,
    n_gates=3,
    n_bias_gates=4,
    gate_names=GATES,
    bias_gates=tuple(BiasGate("gx", g) for g in GATES) + (BiasGate("gh", "o"),),
    has_cell_state=False,
    has_attention=True,
    supports_peephole=False,
    supports_projection=False,
    requires_sic_eq_dhc=True,
    stages=lbr_stages(attention=True),
    doc=__doc__,
)
