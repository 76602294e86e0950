"""RNN cell kinds as declarative specs (see :mod:`pydnnl.cells.spec` for the formula schema)."""
from __future__ import annotations

# The specs are pymbolic expressions, made at import (pymbolic's import is 65-70 ms of
# `import pydnnl`). Making them on first use would only move that time: creating an RNN
# primitive reads its spec, and other kernels' keys hold pymbolic size variables.
from . import augru, gru, lbr_augru, lbr_gru, lstm, vanilla_rnn
from .spec import (
    FUNCTION_DERIVATIVES,
    Assignment,
    BiasGate,
    CellSpec,
    RecurrentGemm,
    Stage,
    differentiate,
    evaluate,
    evaluate_cell,
    numpy_functions,
)

#: name -> spec, in alg_kind order
CELLS: dict[str, CellSpec] = {
    s.name: s
    for s in (vanilla_rnn.SPEC, lstm.SPEC, gru.SPEC, lbr_gru.SPEC, augru.SPEC, lbr_augru.SPEC)
}

_BY_ALG_KIND = {s.alg_kind: s for s in CELLS.values()}


def get_cell(name_or_alg_kind: str | int | CellSpec) -> CellSpec:
    """The spec for a oneDNN cell name (``"vanilla_lstm"``), alg_kind value (0x2fff), enum
    member with an integer value, or a spec (returned as is)."""
    if isinstance(name_or_alg_kind, CellSpec):
        return name_or_alg_kind
    if isinstance(name_or_alg_kind, str):
        key = name_or_alg_kind.lower()
        if key.startswith("dnnl_"):
            key = key[5:]
        if key in CELLS:
            return CELLS[key]
        raise ValueError(f"unknown RNN cell kind {name_or_alg_kind!r}; expected one of "
                         f"{', '.join(CELLS)}")
    try:
        value = int(name_or_alg_kind)
    except (TypeError, ValueError):
        raise ValueError(f"unknown RNN cell kind {name_or_alg_kind!r}") from None
    if value in _BY_ALG_KIND:
        return _BY_ALG_KIND[value]
    raise ValueError(f"unknown RNN cell alg_kind {value:#x}; expected one of "
                     f"{', '.join(hex(k) for k in _BY_ALG_KIND)}")


__all__ = [
    "CELLS", "FUNCTION_DERIVATIVES", "Assignment", "BiasGate", "CellSpec", "RecurrentGemm",
    "Stage", "differentiate", "evaluate", "evaluate_cell", "get_cell", "numpy_functions",
]
